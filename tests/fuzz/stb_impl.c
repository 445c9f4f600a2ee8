// stb_impl.c: stb_image and stb_image_resize compiled into the fuzz targets from Debian's headers
// (see the Makefile's fuzzing section): these definitions take the place of -lstb's, so the PNG
// decoder and the resizer that the image folder loader calls run instrumented, with coverage for
// the fuzzer and the sanitizers' checks. (JPEG files go to libjpeg-turbo, not instrumented.)
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#include <stb/stb_image_resize.h>
