// fuzz_checkpoint.c: the checkpoint loader (run/checkpoint.c) on arbitrary files: the config in
// the metadata (ckpt_load_model builds the model it describes, after checking every tensor's
// name, shape and dtype against it), the EMA weights of a given model (ckpt_load_ema), the
// recorded step (ckpt_step) and the optimizer state (ckpt_load_optimizer). Each either loads or
// says why not; nothing else (a fatal error, a leak) is allowed.
#include "../../run/checkpoint.h"
#include "fuzz.h"

static DiT ref; // the model the seeds were written for, allocated
static AdamW opt;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_setup();
    dit_layout(&ref, &(DiTConfig)FUZZ_CKPT_MODEL);
    dit_alloc(&ref, false, true); // with an EMA
    opt = adamw_default(1e-3);
    return 0;
}

#define EXPECT_MESSAGE(call)                                                                       \
    do {                                                                                           \
        err[0] = 0;                                                                                \
        int rc_ = (call);                                                                          \
        fuzz_say("%s: %d %s", #call, rc_, err);                                                    \
        if (rc_ < 0 && !err[0]) {                                                                  \
            fprintf(stderr, "fuzz_checkpoint: %s failed without a message\n", #call);             \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512], err[1024];
    fuzz_file(path, "model.safetensors", data, size);
    DiT m;
    EXPECT_MESSAGE(ckpt_load_model(&m, path, err, sizeof err));
    if (m.ps.params) { // a model it builds has a config the training flags could have given
        const DiTConfig *c = &m.cfg;
        if (!(c->mlp_ratio > 0 && c->mlp_ratio <= DIT_MAX_MLP_RATIO) ||
            !(c->class_dropout_prob >= 0 && c->class_dropout_prob < 1)) {
            fprintf(stderr, "fuzz_checkpoint: loaded a model with mlp_ratio %g, class_dropout_prob "
                    "%g\n", c->mlp_ratio, c->class_dropout_prob);
            abort();
        }
        dit_free(&m);
    }
    EXPECT_MESSAGE(ckpt_load_ema(&ref, path, err, sizeof err));
    EXPECT_MESSAGE(ckpt_step(path, err, sizeof err));
    EXPECT_MESSAGE(ckpt_load_optimizer(&ref.ps, &opt, FUZZ_CKPT_RUN, path, err, sizeof err));
    return 0;
}
