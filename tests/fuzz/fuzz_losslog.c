// fuzz_losslog.c: the loss.csv reader (losslog_read, run/losslog.c) on arbitrary files. A log it
// accepts has at least one row and strictly increasing steps that are whole numbers >= 0,
// compares with itself at every step (losslog_rel_diff, as `compare` runs it), and plots as
// `compare` and loss.png plot it (one panel, log y axis, plot_panel into a small canvas) whatever
// its values.
#include "../../run/losslog.h"
#include "../../draw/plot.h"
#include "fuzz.h"
#include <math.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_setup();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512], err[1024] = "";
    fuzz_file(path, "loss.csv", data, size);
    LossLog l;
    if (losslog_read(&l, path, err, sizeof err)) {
        fuzz_say("refused: %s", err);
        if (!err[0] || l.n || l.step) abort(); // refused: a message, nothing to free
        return 0;
    }
    fuzz_say("accepted: %d rows", l.n);
    if (l.n < 1) abort();
    for (int i = 0; i < l.n; i++)
        if (!(isfinite(l.step[i]) && l.step[i] >= 0 && l.step[i] == floor(l.step[i])) ||
            (i && !(l.step[i] > l.step[i - 1])))
            abort();
    double *steps = xcalloc((size_t)l.n, sizeof(double)), *rel = xcalloc((size_t)l.n, sizeof(double));
    if (losslog_rel_diff(&l, &l, steps, rel) != l.n) abort();
    const uint8_t white[3] = {255, 255, 255};
    Canvas cv = canvas_create(240, 160, white);
    PlotSeries s[2] = {{"run", l.step, l.loss, l.n, {31, 119, 180}},
                       {"|A - B| / |B|", steps, rel, l.n, {214, 39, 40}}};
    plot_panel(&cv, 0, 0, 240, 160, "loss", "step", s, 2, true);
    canvas_free(&cv);
    free(steps);
    free(rel);
    losslog_free(&l);
    return 0;
}
