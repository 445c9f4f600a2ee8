// patch.c: patch embedding (a conv with stride = kernel = the patch, done as patchify + linear)
// and unpatchify, the DiT final layer's token-to-image rearrangement, for images and clips. A
// clip of F frames travels as an image of its frames stacked along the height, (B, C, F*H, W):
// the same memory as (B, C, F, H, W). A sequence shard patchifies only its own tokens
// [t0, t0 + n); padding rows past the last patch stay zero.
#include "common.h"

// iarg: the ClipShape (B, C, F, H, W, pt, p), t0, n, channels_last
static void save_args(Node *n, ClipShape s, int t0, int len, bool channels_last) {
    if (n) memcpy(n->iarg, (int[]){s.B, s.C, s.F, s.H, s.W, s.pt, s.p, t0, len, channels_last}, 10 * sizeof(int));
}
#define PATCH_ARGS(a) (ClipShape){a[0], a[1], a[2], a[3], a[4], a[5], a[6]}, a[7], a[8], a[9]

// img (B, C, F*H, W) of F frames as the clip shape of pt x p x p patches, checked
static ClipShape clip_shape(const char *op, Tensor *img, int F, int pt, int p) {
    char s[64];
    CHECK(img->ndim == 4, "%s: clips must be [B, C, frames x H, W], got %s", op,
          tensor_shape_str(img, s, sizeof s));
    CHECK(F >= 1 && img->shape[2] % F == 0, "%s: %d rows do not hold %d frames", op, img->shape[2], F);
    ClipShape c = {img->shape[0], img->shape[1], F, img->shape[2] / F, img->shape[3], pt, p};
    CHECK(pt >= 1 && F % pt == 0, "%s: %d frames are not a multiple of the patch's %d frames", op, F, pt);
    CHECK(p > 0 && c.H % p == 0 && c.W % p == 0,
          "%s: image size %dx%d is not a multiple of the patch size %d", op, c.H, c.W, p);
    return c;
}

static void patchify_bwd(Node *n) {
    real *dimg = node_grad(n, 0);
    if (dimg) RUN(node_on_device(n), patch_scatter, dimg, n->out->grad, PATCH_ARGS(n->iarg));
}

Tensor *patchify(Tape *tp, Tensor *img, int F, int pt, int p, int t0, int len, bool channels_last) {
    ClipShape s = clip_shape("patchify", img, F, pt, p);
    CHECK(t0 >= 0 && len > 0, "patchify: tokens [%d, %d) is not a valid range", t0, t0 + len);
    Tensor *out = tensor_new(tp->arena, 3, s.B, len, s.C * pt * p * p);
    RUN(on_device(tp), patch_gather, out->data, img->data, s, t0, len, channels_last);
    save_args(tape_record(tp, "patchify", patchify_bwd, out, 1, img), s, t0, len, channels_last);
    return out;
}

// w is (D,C,p,p), or (D,C,pt,p,p) for patches of pt frames: seen as the (D, C*pt*p*p) weight of
// a linear over patchified tokens
Tensor *patch_embed(Tape *tp, Tensor *img, int F, Tensor *w, Tensor *b, int t0, int len) {
    char s[64];
    int d = w->ndim, p = w->shape[d - 1], pt = d == 5 ? w->shape[2] : 1;
    CHECK((d == 4 || d == 5) && w->shape[d - 2] == p && img->ndim == 4 && w->shape[1] == img->shape[1],
          "patch_embed: weight %s must be [D, C, p, p] or [D, C, pt, p, p] with C = %d image channels",
          tensor_shape_str(w, s, sizeof s), img->ndim == 4 ? img->shape[1] : -1);
    Tensor *w2 = tensor_reshape(tp->arena, w, 2, (int[]){w->shape[0], w->shape[1] * pt * p * p});
    return linear(tp, patchify(tp, img, F, pt, p, t0, len, false), w2, b);
}

static void unpatchify_bwd(Node *n) {
    real *dtok = node_grad(n, 0);
    if (dtok) RUN(node_on_device(n), patch_gather, dtok, n->out->grad, PATCH_ARGS(n->iarg));
}

// tokens is (B, (F/pt)*(H/p)*(W/p), pt*p*p*C), rows laid out (a, i, j, c)
Tensor *unpatchify(Tape *tp, Tensor *tokens, int C, int F, int H, int W, int pt, int p) {
    char s[64];
    CHECK(tokens->ndim == 3 && p > 0 && pt > 0 && F % pt == 0 && H % p == 0 && W % p == 0 &&
              tokens->shape[1] == (F / pt) * (H / p) * (W / p) && tokens->shape[2] == pt * p * p * C,
          "unpatchify: tokens %s do not form a clip of %d frames of %dx%d, %d channels, with "
          "patch %dx%dx%d", tensor_shape_str(tokens, s, sizeof s), F, H, W, C, pt, p, p);
    int B = tokens->shape[0], T = tokens->shape[1];
    ClipShape sh = {B, C, F, H, W, pt, p};
    Tensor *out = tensor_new(tp->arena, 4, B, C, F * H, W);
    RUN(on_device(tp), patch_scatter, out->data, tokens->data, sh, 0, T, true);
    save_args(tape_record(tp, "unpatchify", unpatchify_bwd, out, 1, tokens), sh, 0, T, true);
    return out;
}
