// step.c: see step.h.
#include "step.h"
#include "../core/check.h"
#include "../core/device.h"
#include <string.h>

double step_gradients(DiT *m, SeqParallel *sp, Arena *arena, Tensor *x, Tensor *t,
                      const int64_t *y, Tensor *target, int batch, const DiTPack *pack, real *out) {
    CHECK(!pack || (sp->accum == 1 && sp->dp == 1), "step_gradients: packs run in one "
          "micro-batch of one data group");
    if (arena->device) // the batch goes up once; the step's activations live on the device
        x = tensor_to(arena, x), t = tensor_to(arena, t), target = tensor_to(arena, target);
    size_t mark = arena_mark(arena);
    double loss = 0;
    ExactMode exact;
    if (sp->exact) ps_use_exact(&m->ps);
    ps_zero_grad(&m->ps); // backward adds into the gradients: the micro-batches accumulate
    for (int i = 0; i < sp->accum; i++) {
        int first, n;
        sp_micro_batch(sp, x->shape[0], i, &first, &n);
        Tape tp = tape_create(arena);
        tp.watch = sp->watch, tp.watch_ctx = sp->watch_ctx;
        if (i == 0) sp_exact_tape(sp, &tp, &exact); // one loss sum for every micro-batch
        else tp.exact = sp->exact ? &exact : NULL;
        DiTShard sh = sp_loss_shard(sp, n, batch);
        sh.pack = pack;
        // packs: one micro-batch, and the times and labels are per image
        Tensor *tokens = dit_forward(m, &tp, tensor_rows(arena, x, first, n),
                                     pack ? t : tensor_rows(arena, t, first, n), pack ? y : y + first, &sh);
        Tensor *l = dit_loss(m, &tp, tokens, tensor_rows(arena, target, first, n), &sh);
        backward(&tp, l);
        loss += tensor_item(l);
        if (out) {
            Tensor *img = sp_gather_image(&tp, sp, tokens, &m->cfg, pack);
            copy_bytes(out + img->size / n * first, img->data, img->size * sizeof(real));
        }
        tape_free(&tp);
        arena_release(arena, mark);
    }
    ps_check_reached(&m->ps);
    sp_sync_grads(sp, &m->ps);
    if (sp->bugs & BUG_LOSS_TIMES_SP) loss *= sp_local_mean_scale(sp); // this rank's local mean
    else if (sp->exact) return sp_exact_loss(sp, &exact);
    comm_all_reduce_double(sp->world, &loss, 1);
    return loss;
}
