// identical.c: see identical.h.
#include "identical.h"
#include "../core/safetensors.h"
#include "../run/losslog.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>

// Values of the two curves that differ (first differing step into *first, or -1); -1 on a read error
static long losses_differ(const char *a, const char *b, long *values, double *first) {
    char pa[4096], pb[4096], err[512];
    snprintf(pa, sizeof pa, "%s/loss.csv", a), snprintf(pb, sizeof pb, "%s/loss.csv", b);
    LossLog la = {0}, lb = {0};
    if (losslog_read(&la, pa, err, sizeof err) || losslog_read(&lb, pb, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return losslog_free(&la), losslog_free(&lb), -1;
    }
    long differ = la.n != lb.n ? (la.n > lb.n ? la.n - lb.n : lb.n - la.n) : 0;
    *first = -1;
    for (int i = 0; i < la.n && i < lb.n; i++)
        if (memcmp(&la.step[i], &lb.step[i], sizeof(double)) || memcmp(&la.loss[i], &lb.loss[i], sizeof(double))) {
            if (*first < 0) *first = la.step[i];
            differ++;
        }
    if (*first < 0 && la.n != lb.n) *first = la.n < lb.n ? lb.step[la.n] : la.step[lb.n];
    *values += la.n > lb.n ? la.n : lb.n;
    losslog_free(&la), losslog_free(&lb);
    return differ;
}

// Values of file `name` that differ between the runs (the first differing tensor named); -1 on a
// read error or different tensors, 0 when a lacks the file
static long tensors_differ(const char *a, const char *b, const char *name, long *values) {
    char pa[4096], pb[4096], err[512];
    snprintf(pa, sizeof pa, "%s/%s", a, name), snprintf(pb, sizeof pb, "%s/%s", b, name);
    if (access(pa, F_OK)) return 0;
    SafeTensors sa = {0}, sb = {0};
    if (st_read(pa, &sa, err, sizeof err) || st_read(pb, &sb, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return st_free(&sa), st_free(&sb), -1;
    }
    long differ = 0;
    for (int i = 0; i < sa.n && differ >= 0; i++) {
        const StTensor *x = &sa.tensors[i], *y = st_find(&sb, x->name);
        if (!y || y->dtype != x->dtype || y->nbytes != x->nbytes) {
            fprintf(stderr, "error: %s has tensor '%s' %s, which %s does not hold alike\n", pa, x->name,
                    st_dtype_name(x->dtype), pb);
            differ = -1;
            break;
        }
        size_t size = st_dtype_size(x->dtype), n = x->nbytes / size, here = 0;
        for (size_t k = 0; k < n; k++)
            here += memcmp((const char *)x->data + k * size, (const char *)y->data + k * size, size) != 0;
        if (here && !differ) printf("first differing tensor: %s '%s' (%zu of %zu values)\n", name, x->name, here, n);
        differ += (long)here, *values += (long)n;
    }
    st_free(&sa), st_free(&sb);
    return differ;
}

int runs_identical(const char *a, const char *b) {
    long values = 0, differ = 0, d;
    double first;
    if ((d = losses_differ(a, b, &values, &first)) < 0) return 2;
    if (d) printf("first differing step: %.0f (loss.csv; %ld logged losses differ)\n", first, d);
    differ += d;
    const char *files[] = {"model.safetensors", "ema.safetensors", "optimizer.safetensors"};
    for (int i = 0; i < 3; i++) {
        if ((d = tensors_differ(a, b, files[i], &values)) < 0) return 2;
        differ += d;
    }
    printf("%s: %ld of %ld values differ\n", differ ? "NOT identical" : "identical", differ, values);
    return differ ? 1 : 0;
}
