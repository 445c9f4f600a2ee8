// dit_positions.c: where a token is (see dit.h): the 2-D and 3-D sin-cos position tables, the
// caption's positions and the rotary angles.
#include "dit.h"
#include <math.h>

void dit_pos_embed_at(real *e, int i, int j, int D) {
    int quarter = D / 4;
    for (int k = 0; k < quarter; k++) {
        double w = 1.0 / pow(10000.0, (double)k / quarter);
        e[k] = (real)sin(j * w), e[quarter + k] = (real)cos(j * w);
        e[2 * quarter + k] = (real)sin(i * w), e[3 * quarter + k] = (real)cos(i * w);
    }
}

void dit_pos_embed_clip(real *e, int f, int i, int j, int D) {
    int half = D / 8; // sincos(f) over D/4
    for (int k = 0; k < half; k++) {
        double w = 1.0 / pow(10000.0, (double)k / half);
        e[k] = (real)sin(f * w), e[half + k] = (real)cos(f * w);
    }
    dit_pos_embed_at(e + D / 4, i, j, D - D / 4);
}

void dit_caption_positions(real *e, int L, int D) {
    for (int j = 0; j < L; j++) dit_pos_embed_at(e + (size_t)j * D, 0, j, D);
}

void dit_position(real *e, const DiTConfig *c, DiTGrid g, int t) {
    int f, i, j;
    dit_grid_coords(g, t, &f, &i, &j);
    if (dit_frames(c) > 1) dit_pos_embed_clip(e, f, i, j, c->hidden_size);
    else dit_pos_embed_at(e, i, j, c->hidden_size);
}

bool dit_rope_fits(int dh) { return dh % 2 == 0 && dh >= 6; }

void dit_rope_angles(real *cs, int t, int frames, int gh, int gw, int dh) {
    int c = dh / 2, side = c / 3, first[3] = {0, c - 2 * side, c - side}, pairs[3] = {c - 2 * side, side, side};
    bool inside = t >= 0 && t < frames * gh * gw;
    int at[3] = {t / (gh * gw), t / gw % gh, t % gw};
    for (int a = 0; a < 3; a++)
        for (int k = 0; k < pairs[a]; k++) {
            double angle = inside ? at[a] * pow(DIT_ROPE_THETA, -(double)k / pairs[a]) : 0;
            cs[2 * (first[a] + k)] = (real)cos(angle), cs[2 * (first[a] + k) + 1] = (real)sin(angle);
        }
}
