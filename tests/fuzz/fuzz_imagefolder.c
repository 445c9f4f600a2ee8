// fuzz_imagefolder.c: the image folder loader (data/imagefolder.c) on arbitrary image files. The
// first byte picks the image size (1 to 32: sizes equal to the file's shorter side take the copy
// path, the others the resize); the rest is written as img.png into an empty folder, which is
// opened (listing, stbi_info on every file) and, if that worked, decoded and cropped (stbi_load
// and the resize), twice: the second read comes from the cache. Either works or says why.
#include "../../data/imagefolder.h"
#include "fuzz.h"
#include <math.h>
#include <sys/stat.h>

static char folder[512];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_setup();
    fuzz_path(folder, "images");
    if (mkdir(folder, 0700)) {
        perror(folder);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int S = 1 + data[0] % 32;
    char path[512], err[1024] = "";
    snprintf(path, sizeof path, "%s/img.png", folder);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data + 1, 1, size - 1, f) != size - 1 || fclose(f)) abort();
    ImageFolder imf;
    if (image_folder_open(&imf, folder, S, err, sizeof err)) {
        fuzz_say("refused by image_folder_open: %s", err);
        if (!err[0]) abort(); // refused without a message
        return 0;
    }
    if (imf.n != 1 || imf.n_classes != 1) abort();
    real *img = xmalloc((size_t)3 * S * S * sizeof(real));
    for (int pass = 0; pass < 2; pass++) {
        err[0] = 0;
        if (image_folder_load(&imf, 0, img, err, sizeof err)) {
            fuzz_say("refused by image_folder_load: %s", err);
            if (!err[0]) abort();
            break;
        }
        for (int i = 0; i < 3 * S * S; i++)
            if (!(img[i] >= -1 && img[i] <= 1)) abort(); // pixels map into [-1, 1]
    }
    fuzz_say("loaded at %dx%d", S, S);
    free(img);
    image_folder_close(&imf);
    return 0;
}
