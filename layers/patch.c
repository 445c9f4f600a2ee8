// patch.c: patch embedding (a conv with stride = kernel = p, done as patchify + linear) and
// unpatchify, the DiT final layer's token-to-image rearrangement. A sequence shard patchifies only
// its own tokens [t0, t0 + n); padding rows past the last patch stay zero.
#include "common.h"

// iarg: B, C, H, W, p, t0, n, channels_last
#define PATCH_ARGS(a) a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]

static void patchify_bwd(Node *n) {
    real *dimg = node_grad(n, 0);
    if (dimg) RUN(node_on_device(n), patch_scatter, dimg, n->out->grad, PATCH_ARGS(n->iarg));
}

// img is (B,C,H,W)
Tensor *patchify(Tape *tp, Tensor *img, int p, int t0, int len, bool channels_last) {
    char s[64];
    CHECK(img->ndim == 4, "patchify: image must be [B, C, H, W], got %s",
          tensor_shape_str(img, s, sizeof s));
    int B = img->shape[0], C = img->shape[1], H = img->shape[2], W = img->shape[3];
    CHECK(p > 0 && H % p == 0 && W % p == 0,
          "patchify: image size %dx%d is not a multiple of the patch size %d", H, W, p);
    CHECK(t0 >= 0 && len > 0, "patchify: tokens [%d, %d) is not a valid range", t0, t0 + len);
    Tensor *out = tensor_new(tp->arena, 3, B, len, C * p * p);
    RUN(on_device(tp), patch_gather, out->data, img->data, B, C, H, W, p, t0, len, channels_last);
    Node *n = tape_record(tp, "patchify", patchify_bwd, out, 1, img);
    if (n) memcpy(n->iarg, (int[]){B, C, H, W, p, t0, len, channels_last}, 8 * sizeof(int));
    return out;
}

// w is (D,C,p,p): seen as the (D, C*p*p) weight of a linear over patchified tokens
Tensor *patch_embed(Tape *tp, Tensor *img, Tensor *w, Tensor *b, int t0, int len) {
    char s[64];
    CHECK(w->ndim == 4 && w->shape[2] == w->shape[3] && img->ndim == 4 &&
              w->shape[1] == img->shape[1],
          "patch_embed: weight %s must be [D, C, p, p] with C = %d image channels",
          tensor_shape_str(w, s, sizeof s), img->ndim == 4 ? img->shape[1] : -1);
    int p = w->shape[2];
    Tensor *w2 = tensor_reshape(tp->arena, w, 2, (int[]){w->shape[0], w->shape[1] * p * p});
    return linear(tp, patchify(tp, img, p, t0, len, false), w2, b);
}

static void unpatchify_bwd(Node *n) {
    real *dtok = node_grad(n, 0);
    if (dtok) RUN(node_on_device(n), patch_gather, dtok, n->out->grad, PATCH_ARGS(n->iarg));
}

// tokens is (B, (H/p)*(W/p), p*p*C), rows laid out (i, j, c)
Tensor *unpatchify(Tape *tp, Tensor *tokens, int C, int H, int W, int p) {
    char s[64];
    CHECK(tokens->ndim == 3 && p > 0 && H % p == 0 && W % p == 0 &&
              tokens->shape[1] == (H / p) * (W / p) && tokens->shape[2] == p * p * C,
          "unpatchify: tokens %s do not form a %dx%d image of %d channels with patch %d",
          tensor_shape_str(tokens, s, sizeof s), H, W, C, p);
    int B = tokens->shape[0], T = tokens->shape[1];
    Tensor *out = tensor_new(tp->arena, 4, B, C, H, W);
    RUN(on_device(tp), patch_scatter, out->data, tokens->data, B, C, H, W, p, 0, T, true);
    Node *n = tape_record(tp, "unpatchify", unpatchify_bwd, out, 1, tokens);
    if (n) memcpy(n->iarg, (int[]){B, C, H, W, p, 0, T, true}, 8 * sizeof(int));
    return out;
}
