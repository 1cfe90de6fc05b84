/*
 * replay_fuzz.c - a main() for the libFuzzer targets (*_fuzz.c) when built without libFuzzer.
 *
 * Runs LLVMFuzzerTestOneInput once on every file named on the command line, descending one level
 * into directories, so the seed corpus (and any crash file) replays under gcc, ASan and UBSan in
 * the ordinary ctest run. Exit 0 when every input ran; an assertion or sanitizer aborts.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/buf.h"

#define REPLAY_MAX_INPUT (16 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    char chunk[65536];
    struct buf b;
    size_t got;
    FILE *f = fopen(path, "rb");

    if (!f) {
        perror(path);
        return -1;
    }
    buf_init(&b, REPLAY_MAX_INPUT);
    while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0)
        if (buf_append(&b, chunk, got)) {
            fprintf(stderr, "%s: larger than %d bytes\n", path, REPLAY_MAX_INPUT);
            fclose(f);
            buf_cleanup(&b);
            return -1;
        }
    fclose(f);
    /* A heap copy of exactly the input's size, so ASan catches reads past the end. */
    {
        size_t n = buf_len(&b);
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, buf_ptr(&b), n);
        LLVMFuzzerTestOneInput(copy, n);
        free(copy);
    }
    buf_cleanup(&b);
    return 0;
}

int main(int argc, char **argv)
{
    int runs = 0, bad = 0;

    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            bad++;
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            DIR *d = opendir(argv[i]);
            struct dirent *e;
            char path[4096];
            while (d && (e = readdir(d)) != NULL) {
                if (e->d_name[0] == '.')
                    continue;
                snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
                bad += run_file(path) != 0;
                runs++;
            }
            if (d)
                closedir(d);
        } else {
            bad += run_file(argv[i]) != 0;
            runs++;
        }
    }
    printf("replayed %d inputs, %d unreadable\n", runs, bad);
    return bad || runs == 0 ? 1 : 0;
}
