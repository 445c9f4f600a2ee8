// allowed.c: see allowed.h.
#include "allowed.h"
#include "../data/data.h"
#include "../parallel/transport/usage.h"
#include "config.h"
#include "../parallel/mesh/batch.h"
#include <stdio.h>

// Packs (--max-tokens) pack a folder's images, never more tokens than the model's square image
static const char *packs_refusal(const TrainConfig *tc, char *buf, size_t len) {
    const DiTConfig *m = &tc->model;
    if (!tc->max_tokens) return NULL;
    if (data_procedural(tc->data))
        return snprintf(buf, len, "--max-tokens packs the images of a folder; it does not run with the "
                        "%s data (pass --data DIR)", tc->data), buf;
    if (dit_frames(m) > 1)
        return snprintf(buf, len, "--max-tokens packs the images of a folder; a clip model (--frames %d) "
                        "trains on whole clips of --input-size: leave it out", dit_frames(m)), buf;
    if (tc->max_tokens > dit_tokens(m))
        return snprintf(buf, len, "--max-tokens %d is above the %d tokens of --input-size %d (patch %d); "
                        "pass at most %d, or a larger --input-size", tc->max_tokens, dit_tokens(m),
                        m->input_size, m->patch_size, dit_tokens(m)), buf;
    return NULL;
}

// Captions (--cond text) with what they do not run with yet
static const char *text_refusal(const TrainConfig *tc, char *buf, size_t len) {
    const DiTConfig *m = &tc->model;
    if (!m->text) return NULL;
    if (tc->sample_sizes.n) return snprintf(buf, len, "%s", TEXT_SAMPLE_SIZES), buf;
    if (m->in_context)
        return snprintf(buf, len, "--cond text attends to the caption in every block; it does not combine "
                        "with --in-context (leave out one of them)"), buf;
    return NULL;
}

// The mesh of these options over `ranks` ranks for sequences of T tokens: the group sizes, the
// layout, the padding, the devices, the bugs' options, and (train) each data group's share of the
// batch
static const char *mesh_refusal(const TrainConfig *tc, const SpOptions *o, unsigned command, int ranks, int T,
                                char *buf, size_t len) {
    SeqParallel sp;
    const char *why = sp_context_error(o, &tc->model, buf, len);
    if (!why) why = sp_init(&sp, NULL, ranks, 0, o, T, tc->model.num_heads, buf, len);
    if (why) return why;
    int first, count;
    if (command & FOR_TRAIN) why = sp_batch_slice(&sp, tc->batch, &first, &count, buf, len);
    sp_free(&sp);
    return why;
}

const char *run_refusal(const TrainConfig *tc, unsigned command, int ranks, char *buf, size_t len) {
    const DiTConfig *m = &tc->model;
    const char *why = dit_config_error(m, buf, len);
    if (!why && (command & (FOR_TRAIN | FOR_SAMPLE))) why = sample_sizes_error(&tc->sample_sizes, m, buf, len);
    if (!why && (command & FOR_TRAIN)) why = packs_refusal(tc, buf, len);
    if (!why && (command & (FOR_TRAIN | FOR_SAMPLE))) why = text_refusal(tc, buf, len);
    if (!why) why = sp_bugs_error(&tc->parallel, m, ranks, buf, len);
    if (why || tc->parallel.layout == SP_AUTO) return why; // auto: the planner asks of each layout
    int T = tc->max_tokens ? tc->max_tokens : dit_tokens(m);
    SpOptions o = tc->parallel;
    if (command & FOR_SAMPLE) o.packs = tc->sample_sizes.n > 0; // sample runs the world as one group
    why = mesh_refusal(tc, &o, command, ranks, T, buf, len);
    if (!why && (command & FOR_TRAIN) && (tc->max_tokens || tc->sample_sizes.n)) {
        o.packs = true; // the samples' context: packs of their sizes
        why = mesh_refusal(tc, &o, FOR_SAMPLE, ranks, dit_tokens(m), buf, len);
    }
    return why;
}

void run_check(const TrainConfig *tc, unsigned command, int ranks) {
    char why[1024];
    if (run_refusal(tc, command, ranks, why, sizeof why)) usage_error("%s", why);
}
