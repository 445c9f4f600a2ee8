// probe.c: see probe.h. Batch file: x (B,C,H,W), t (B), y (B) integer, target (B,C_out,H,W).
// Result file: out (B,C_out,H,W), loss (1), grad.<name> for every trainable parameter.
#include "probe.h"
#include "../core/check.h"
#include "../core/safetensors.h"
#include "../parallel/ulysses.h"
#include "checkpoint.h"
#include "config.h"
#include "flags.h"
#include "outfile.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: mpirun -np N train/train probe --ckpt M.safetensors --batch B.safetensors --out R.safetensors\n"
           "  One forward + backward of loss = mean((model(x, t, y) - target)^2), eval mode.\n"
           "  --ckpt PATH           DiT checkpoint (safetensors with the config in __metadata__)\n"
           "  --batch PATH          x F32 [B,C,H,W], t F32 [B], y I64 [B], target F32 [B,C_out,H,W]\n"
           "  --out PATH            writes out, loss and grad.<name> for every trainable parameter\n"
           SEQ_FLAGS_HELP);
}

// The batch tensor `name`, which this checkpoint needs to be a float tensor (F32 or F64) or, if
// `integer`, an I64 or I32 tensor, of this shape (a -1 is the batch size B, any B >= 1). Anything
// else is a usage error naming the tensor, what was expected and what the file holds.
static const StTensor *batch_tensor(const SafeTensors *st, const char *path, const char *name,
                                    bool integer, int ndim, const int64_t *shape) {
    const StTensor *t = st_find(st, name);
    bool ok = t && t->ndim == ndim && (integer ? t->dtype == ST_I64 || t->dtype == ST_I32
                                               : t->dtype == ST_F32 || t->dtype == ST_F64);
    for (int i = 0; ok && i < ndim; i++)
        ok = shape[i] < 0 ? t->shape[i] >= 1 : t->shape[i] == shape[i];
    if (ok) return t;
    char want[128], got[64];
    int n = snprintf(want, sizeof want, "%s [", integer ? "I64 or I32" : "F32 or F64");
    for (int i = 0; i < ndim; i++)
        n += snprintf(want + n, sizeof want - (size_t)n, shape[i] < 0 ? "%sB" : "%s%lld",
                      i ? ", " : "", (long long)shape[i]);
    snprintf(want + n, sizeof want - (size_t)n, "]%s", shape[0] < 0 ? " with B >= 1" : "");
    if (!t)
        usage_error("--batch %s has no tensor '%s'; a probe batch for this checkpoint needs '%s' "
                    "as %s", path, name, name, want);
    usage_error("--batch %s: '%s' must be %s for this checkpoint, but the file has %s %s", path,
                name, want, st_dtype_name(t->dtype), st_shape_str(got, sizeof got, t->shape, t->ndim));
}

// Converts a batch tensor that batch_tensor accepted into dst, which has its shape.
static void batch_into(Tensor *dst, const StTensor *t) {
    char err[512];
    CHECK(!st_to_real(t, dst->data, dst->size, err, sizeof err), "%s", err);
}

int probe_main(int argc, char **argv, Comm *c) {
    const char *ckpt = NULL, *batch = NULL, *out = NULL;
    SeqPolicy policy = seq_policy_default();
    unsigned bugs = 0;
    SeqAttention variant = SP_GATHER;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (c->rank == 0) help();
            return 0;
        } else if (!strcmp(argv[i], "--ckpt")) ckpt = flag_value(argc, argv, &i);
        else if (!strcmp(argv[i], "--batch")) batch = flag_value(argc, argv, &i);
        else if (!strcmp(argv[i], "--out")) out = flag_value(argc, argv, &i);
        else if (!seq_flag(argc, argv, &i, &policy, &variant, &bugs))
            usage_error("probe: unknown argument '%s'", argv[i]);
    }
    if (!ckpt || !batch || !out) usage_error("probe needs --ckpt, --batch and --out");
    char text[4096];
    snprintf(text, sizeof text, "ckpt=%s batch=%s out=%s auto_pad=%d pad_multiple=%d sp=%s bugs=%u",
             ckpt, batch, out, policy.auto_pad, policy.pad_multiple, seq_attention_name(variant), bugs);
    comm_check_same(c, "probe arguments", text);
    if (c->rank == 0) { // the rank that writes the result
        out_file_check("--out", out, NULL);
        out_file_not_input("--out", out, "--ckpt", ckpt);
        out_file_not_input("--out", out, "--batch", batch);
    }

    char err[1024];
    DiT m;
    if (ckpt_load_model(&m, ckpt, err, sizeof err)) usage_error("--ckpt: %s", err);
    const DiTConfig *cfg = &m.cfg;
    SafeTensors st;
    if (st_read(batch, &st, err, sizeof err)) usage_error("--batch: %s", err);
    int S = cfg->input_size, Co = dit_out_channels(cfg), T = dit_tokens(cfg);
    const StTensor *xs = batch_tensor(&st, batch, "x", false, 4,
                                      (int64_t[]){-1, cfg->in_channels, S, S});
    int64_t B64 = xs->shape[0];
    const StTensor *ts = batch_tensor(&st, batch, "t", false, 1, &B64);
    const StTensor *ys = batch_tensor(&st, batch, "y", true, 1, &B64);
    const StTensor *gs = batch_tensor(&st, batch, "target", false, 4, (int64_t[]){B64, Co, S, S});
    int B = (int)B64;
    const char *why = seq_validate(&policy, T, c->size, err, sizeof err);
    if (!why) why = ulysses_validate(variant, cfg->num_heads, c->size, bugs, err, sizeof err);
    if (why) usage_error("%s", why);
    SeqShard shard = seq_shard(&policy, T, c->size, c->rank);
    Ulysses u = {.comm = c, .shard = &shard, .policy = &policy, .variant = variant, .bugs = bugs};
    DiTShard dsh = ulysses_dit_shard(&u);
    Arena arena = arena_create(ulysses_step_bytes(&u, cfg, B, true));
    Tensor *x = tensor_new(&arena, 4, B, cfg->in_channels, S, S), *t = tensor_new(&arena, 1, B);
    Tensor *target = tensor_new(&arena, 4, B, Co, S, S);
    batch_into(x, xs);
    batch_into(t, ts);
    batch_into(target, gs);
    int64_t *y = arena_alloc(&arena, (size_t)B * sizeof(int64_t));
    int classes = cfg->num_classes, rows = m.y_table->shape[0]; // rows: +1 for a null class
    for (int b = 0; b < B; b++) { // memcpy: other writers may leave the data unaligned
        int64_t v64;
        int32_t v32;
        if (ys->dtype == ST_I64) memcpy(&v64, (const char *)ys->data + 8 * b, 8), y[b] = v64;
        else memcpy(&v32, (const char *)ys->data + 4 * b, 4), y[b] = v32;
        if (y[b] < 0 || y[b] >= rows) {
            char null[64] = "";
            if (rows > classes) snprintf(null, sizeof null, ", or %d for the null class", classes);
            usage_error("--batch %s: label y[%d] = %lld is not a class of this checkpoint; its "
                        "labels are 0 to %d%s", batch, b, (long long)y[b], classes - 1, null);
        }
    }
    st_free(&st);

    // forward and backward of this rank's shard
    Tape tp = tape_create(&arena);
    ps_zero_grad(&m.ps);
    Tensor *tokens = dit_forward(&m, &tp, x, t, y, &dsh);
    Tensor *loss = dit_loss(&m, &tp, tokens, target, &dsh);
    backward(&tp, loss);
    ps_check_reached(&m.ps);
    seq_sync_grads(&u, &m.ps);
    double total_loss = loss->data[0];
    comm_all_reduce_double(c, &total_loss, 1);

    Tensor *img = ulysses_gather_image(&tp, &u, tokens, cfg); // the full output images

    if (c->rank == 0) {
        StWriter *w = st_writer_new();
        real lossv = (real)total_loss;
        st_writer_add_real(w, "out", 4, img->shape, img->data);
        st_writer_add_real(w, "loss", 1, (int[]){1}, &lossv);
        char name[160];
        for (int i = 0; i < m.ps.n; i++) {
            snprintf(name, sizeof name, "grad.%s", m.ps.t[i]->name);
            st_writer_add_real(w, name, m.ps.t[i]->ndim, m.ps.t[i]->shape, m.ps.t[i]->grad);
        }
        if (st_writer_write(w, out, err, sizeof err)) usage_error("--out: %s", err);
        st_writer_free(w);
        printf("probe: %d rank%s, %d tokens (padded to %d), loss %.9g, wrote %s\n", c->size,
               c->size > 1 ? "s" : "", T, shard.T_pad, total_loss, out);
    }
    tape_free(&tp);
    arena_destroy(&arena);
    seq_shard_free(&shard);
    dit_free(&m);
    return 0;
}
