/*
 * ckpt_tool.c - a small checkpoint CLI for the safetensors interop test (ckpt_safetensors_test.sh)
 * and for looking at checkpoints by hand:
 *   ckpt_tool write ROOT JOB     write the fixture checkpoint ROOT/JOB/step-7, print its path
 *   ckpt_tool check FILE         read FILE (written by Python) and check the fixture values
 *   ckpt_tool latest ROOT JOB    print the newest valid checkpoint
 * Exit 0 when all is well, 1 otherwise.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "worker/ckpt.h"
#include "worker/coll.h"
#include "worker/dist.h"

static int write_fixture(const char *root, const char *job)
{
    struct ckpt_meta m = {.step = 7, .epoch = 1, .sampler = {1, 96}, .world_size = 2};
    struct ckpt_snapshot *s;
    float w[12], mom[12];
    uint16_t b[3] = {coll_f32_to_bf16(1.0f), coll_f32_to_bf16(-2.0f), coll_f32_to_bf16(0.5f)};
    int64_t cnt = 7, ws[2] = {4, 3}, bs[1] = {3}, cs[1] = {1};
    int rc;

    snprintf(m.config_hash, sizeof(m.config_hash), "fixture");
    for (int i = 0; i < 12; i++) {
        w[i] = (float)i * 0.25f;
        mom[i] = (float)-i;
    }
    s = ckpt_snapshot_new(&m);
    if ((rc = ckpt_snapshot_add(s, CKPT_WEIGHTS, "embed.weight", CKPT_F32, 2, ws, w)) ||
        (rc = ckpt_snapshot_add(s, CKPT_WEIGHTS, "head.bias", CKPT_BF16, 1, bs, b)) ||
        (rc = ckpt_snapshot_add(s, CKPT_WEIGHTS, "step_count", CKPT_I64, 1, cs, &cnt)) ||
        (rc = ckpt_snapshot_add(s, CKPT_OPTIM, "embed.weight.m", CKPT_F32, 2, ws, mom)) ||
        (rc = ckpt_write(root, job, 1, s)) == 0)
        printf("%s/%s/step-7\n", root, job);
    ckpt_snapshot_free(s);
    return rc ? 1 : 0;
}

/* The Python side writes x: F32 [2,3] = 0..5, y: I64 [4] = 10..13, z: BF16 [2] = 1.5, -3. */
static int check_file(const char *path)
{
    struct ckpt_snapshot *s = NULL;
    const struct ckpt_tensor *x, *y, *z;
    int bad = 0;

    if (ckpt_read_safetensors(path, &s) != 0)
        return 1;
    x = ckpt_snapshot_find(s, CKPT_WEIGHTS, "x");
    y = ckpt_snapshot_find(s, CKPT_WEIGHTS, "y");
    z = ckpt_snapshot_find(s, CKPT_WEIGHTS, "z");
    if (!x || x->dtype != CKPT_F32 || x->ndim != 2 || x->shape[0] != 2 || x->shape[1] != 3)
        bad = 1;
    for (int i = 0; !bad && i < 6; i++)
        bad |= ((float *)x->data)[i] != (float)i;
    if (!y || y->dtype != CKPT_I64 || y->ndim != 1 || y->shape[0] != 4)
        bad = 1;
    for (int i = 0; !bad && i < 4; i++)
        bad |= ((int64_t *)y->data)[i] != 10 + i;
    if (!z || z->dtype != CKPT_BF16 || z->shape[0] != 2 ||
        coll_bf16_to_f32(((uint16_t *)z->data)[0]) != 1.5f ||
        coll_bf16_to_f32(((uint16_t *)z->data)[1]) != -3.0f)
        bad = 1;
    printf("%s: %s\n", path, bad ? "MISMATCH" : "ok");
    ckpt_snapshot_free(s);
    return bad;
}

#define CKPT_TOOL_USAGE "usage: ckpt_tool write ROOT JOB | check FILE | latest ROOT JOB\n"

int main(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf(CKPT_TOOL_USAGE
               "  write ROOT JOB   write the fixture checkpoint ROOT/JOB/step-7, print its path\n"
               "  check FILE       read a safetensors FILE and check the fixture's values\n"
               "  latest ROOT JOB  print the newest valid checkpoint's step and directory\n"
               "Exit 0 when all is well, 1 otherwise, 64 on usage.\n");
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "write") == 0)
        return write_fixture(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "check") == 0)
        return check_file(argv[2]);
    if (argc == 4 && strcmp(argv[1], "latest") == 0) {
        char dir[4096];
        int64_t step;
        if (ckpt_find_latest(argv[2], argv[3], &step, dir, sizeof(dir)) != 0)
            return 1;
        printf("%" PRId64 " %s\n", step, dir);
        return 0;
    }
    fprintf(stderr, CKPT_TOOL_USAGE);
    return 64;
}
