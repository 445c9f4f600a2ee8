// fuzz_probe_batch.c: the probe batch reader (probe_load_batch, study/probe.c) on arbitrary files,
// against a small model with learn_sigma (C_out = 2C) and a null class: every tensor is checked
// (names, dtypes, shapes, the same B throughout, a pack's images inside its rows, labels in range,
// finite values) and either the batch loads into the arena or the run stops with a usage error
// that names the problem.
#include "../../study/probe.h"
#include "fuzz.h"

static DiT model; // shapes only: the reader needs the config and the label table's rows

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_setup();
    dit_layout(&model, &(DiTConfig)FUZZ_BATCH_MODEL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    SafeTensors st;
    if (st_parse(data, size, &st, NULL, 0)) return 0; // the safetensors target's business
    // an accepted batch's elements take at least 4 bytes each in the file and at most 8 in the
    // arena (labels), plus three Tensor structs and each allocation's alignment
    Arena arena = arena_create(2 * size + 4 * sizeof(Tensor) + sizeof(DiTPack) + 8 * ARENA_ALIGN);
    FUZZ_TRY({
        ProbeBatch b = probe_load_batch(&model, "batch.safetensors", &st, &arena);
        int B = b.x->shape[0], n = b.pack ? b.pack->n : B; // packs: times and labels per image
        fuzz_say("accepted: a batch of %d rows, %d images", B, n);
        char err[256];
        if (b.t->shape[0] != n || b.target->shape[0] != B) abort();
        if (b.pack && (b.pack->B != B || dit_pack_error(b.pack, err, sizeof err))) abort();
        for (int i = 0; i < n; i++)
            if (b.y[i] < 0 || b.y[i] > model.cfg.num_classes) abort();
        const Tensor *values[] = {b.x, b.t, b.target};
        for (int k = 0; k < 3; k++)
            for (size_t i = 0; i < values[k]->size; i++)
                if (!isfinite(values[k]->data[i])) abort();
    });
    arena_destroy(&arena);
    st_free(&st);
    return 0;
}
