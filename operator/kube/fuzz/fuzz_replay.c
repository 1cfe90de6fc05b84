/*
 * Replays fuzz inputs through a LLVMFuzzerTestOneInput built with the normal compiler, so the
 * seed corpus runs in every ctest (and under ASan/UBSan in the Asan build) without clang.
 * Arguments: files or directories (every regular file inside, not recursive).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    struct buf b;
    char chunk[65536];
    size_t n;
    FILE *f = fopen(path, "rb");

    if (!f) {
        perror(path);
        return 1;
    }
    buf_init(&b, 16u << 20);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (buf_append(&b, chunk, n)) {
            fprintf(stderr, "%s: larger than 16 MiB\n", path);
            break;
        }
    }
    fclose(f);
    /* A copy of exactly the input's size, so ASan catches reads past the end. */
    uint8_t *copy = malloc(buf_len(&b) ? buf_len(&b) : 1);
    memcpy(copy, buf_ptr(&b), buf_len(&b));
    LLVMFuzzerTestOneInput(copy, buf_len(&b));
    free(copy);
    buf_cleanup(&b);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, bad = 0;

    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad += run_file(argv[i]);
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char p[4096];
            snprintf(p, sizeof(p), "%s/%s", argv[i], e->d_name);
            if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
                bad += run_file(p);
                files++;
            }
        }
        if (d)
            closedir(d);
    }
    printf("replayed %d inputs\n", files);
    return bad || files == 0 ? 1 : 0;
}
