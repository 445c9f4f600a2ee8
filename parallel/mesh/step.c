// step.c: see step.h.
#include "step.h"
#include "batch.h"
#include "../../core/check.h"
#include "../../core/device.h"
#include <string.h>

// The images of pack pk from its strips img (B, C, pt p, T p) into out (host, the same shape), zero
// where no image is
static void copy_images(real *out, const Tensor *img, const DiTPack *pk, int p) {
    size_t lines = (size_t)img->shape[1] * img->shape[2], W = img->shape[3];
    memset(out, 0, img->size * sizeof(real));
    for (int j = 0; j < pk->n; j++) { // each image's columns of each strip line
        const DiTImage *im = &pk->img[j];
        for (size_t r = 0; r < lines; r++) {
            size_t at = ((size_t)im->row * lines + r) * W + (size_t)im->start * p;
            copy_bytes(out + at, img->data + at, dit_grid_tokens(dit_image_grid(im)) * p * sizeof(real));
        }
    }
}

double step_gradients(DiT *m, SeqParallel *sp, Arena *arena, Tensor *x, Tensor *t,
                      const int64_t *y, Tensor *target, int batch, const DiTPack *pack, real *out) {
    if (arena->device) // the batch goes up once; the step's activations live on the device
        x = tensor_to(arena, x), t = tensor_to(arena, t), target = tensor_to(arena, target);
    size_t mark = arena_mark(arena);
    double loss = 0, batch_tokens = pack ? (double)dit_pack_tokens(pack) : 0;
    if (pack && sp->data) comm_all_reduce(sp->data, COMM_DOUBLE, &batch_tokens, 1); // every data group's
    ExactMode exact;
    if (sp->exact) ps_use_exact(&m->ps);
    ps_zero_grad(&m->ps); // backward adds into the gradients: the micro-batches accumulate
    for (int i = 0; i < sp->accum; i++) {
        int first, n;
        sp_micro_batch(sp, x->shape[0], i, &first, &n);
        Tape tp = tape_create(arena);
        tp.watch = sp->watch, tp.watch_ctx = sp->watch_ctx;
        sp_tape_arithmetic(sp, &tp, &exact, i == 0); // one loss sum for every micro-batch
        DiTPack rows; // packs: the micro-batch's rows, whose images are [i0, i0 + rows.n)
        int i0 = pack ? dit_pack_rows(pack, first, n, &rows) : first, images = pack ? rows.n : n;
        DiTShard sh = sp_loss_shard(sp, n, batch, pack ? &rows : NULL, (long)batch_tokens);
        Tensor *tokens = dit_forward(m, &tp, tensor_rows(arena, x, first, n),
                                     tensor_rows(arena, t, i0, images),
                                     y + (size_t)i0 * (m->cfg.text ? m->cfg.text_len : 1), &sh);
        Tensor *l = dit_loss(m, &tp, tokens, tensor_rows(arena, target, first, n), &sh);
        backward(&tp, l);
        loss += tensor_item(l);
        if (out) {
            Tensor *img = sp_gather_image(&tp, sp, tokens, &m->cfg, pack != NULL);
            real *to = out + img->size / n * first;
            if (pack) copy_images(to, img, &rows, m->cfg.patch_size);
            else copy_bytes(to, img->data, img->size * sizeof(real));
        }
        tape_free(&tp);
        arena_release(arena, mark);
    }
    ps_check_reached(&m->ps);
    sp_sync_grads(sp, &m->ps);
    if (sp->bugs & BUG_LOSS_TIMES_SP) loss *= sp_local_mean_scale(sp); // this rank's local mean
    else if (sp->exact) return sp_exact_loss(sp, &exact);
    comm_all_reduce(sp->world, COMM_DOUBLE, &loss, 1);
    return loss;
}
