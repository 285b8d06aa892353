/*
 * tests/test_checkpoint.c - safetensors checkpoints (engine/checkpoint.h): bit-exact round trip of every
 * dtype with metadata; the file layout checked byte by byte here (and by Python's json + struct when
 * python3 is installed); every rejection, from files whose header JSON and data this test writes by hand;
 * the expected-tensor checks; and atomicity (a crash between writing the temporary file and the rename
 * leaves the old checkpoint intact and loadable); durability and exclusivity (the writer's fsync, rename and
 * O_EXCL watched through its system calls; a failed write or rename leaves nothing behind).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "engine/checkpoint.h"
#include "harness.h"
#define TESTS_TMP_PREFIX "mpt_test_ckpt"
#include "tmpdir.h"

/* ---- helpers ---------------------------------------------------------------------------------- */


static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)sz + 1);
    ck_assert(fread(b, 1, (size_t)sz, f) == (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static void write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert(f != NULL);
    if (n) ck_assert(fwrite(p, 1, n, f) == n);
    ck_assert(fclose(f) == 0);
}

/* A safetensors file written by hand: u64 LE header_len (or `len_override` when nonzero), the JSON, data. */
static void write_st(const char *path, const char *json, const void *data, size_t n, uint64_t len_override) {
    size_t jl = strlen(json);
    uint64_t hl = len_override ? len_override : jl;
    uint8_t *b = malloc(8 + jl + n + 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hl >> (8 * i));
    memcpy(b + 8, json, jl);
    if (n) memcpy(b + 8 + jl, data, n);
    write_all(path, b, 8 + jl + n);
    free(b);
}

static void crc_hex(const void *p, size_t n, char out[9]) {
    snprintf(out, 9, "%08lx", crc32(crc32(0L, Z_NULL, 0), p, (uInt)n));
}

/* The checksum engine/checkpoint.h defines, recomputed here: crc32 of the whole file with the 8 digits at bytes
 * 34..41 (the header starts {"__metadata__":{"crc32":"XXXXXXXX") read as "00000000". */
#define CRC_AT 34
static void file_crc_hex(const uint8_t *file, size_t n, char out[9]) {
    uint8_t *copy = malloc(n);
    memcpy(copy, file, n);
    memset(copy + CRC_AT, '0', 8);
    crc_hex(copy, n, out);
    free(copy);
}

/* Puts the file checksum into a file whose header starts with the crc32 key (its digits are rewritten). */
static void seal(const char *path) {
    size_t n;
    uint8_t *b = read_all(path, &n);
    ck_assert(n > CRC_AT + 8 && memcmp(b + 8, "{\"__metadata__\":{\"crc32\":\"", 26) == 0);
    char crc[9];
    file_crc_hex(b, n, crc);
    memcpy(b + CRC_AT, crc, 8);
    write_all(path, b, n);
    free(b);
}

/* The names of the temporary files (".<name>.tmp-XXXXXX") in directory dir; returns how many, the first in
 * first (a path). */
static int temp_files(const char *dir, const char *name, char *first, size_t cap) {
    char prefix[256];
    snprintf(prefix, sizeof prefix, ".%s.tmp-", name);
    DIR *d = opendir(dir);
    ck_assert(d != NULL);
    int count = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || strlen(e->d_name) != strlen(prefix) + 6) continue;
        if (count++ == 0 && first) snprintf(first, cap, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    return count;
}

static void expect_open_fail(const char *path, const mpt_checkpoint_tensor *exp, int n_exp, mpt_status want,
                             const char *frag1, const char *frag2) {
    mpt_checkpoint *c = (mpt_checkpoint *)1;
    mpt_status st = mpt_checkpoint_open(path, exp, n_exp, &c);
    const char *msg = mpt_last_error();
    ck_assert_msg(st == want, "%s: expected %s, got %s (%s)", path, mpt_status_name(want), mpt_status_name(st), msg);
    ck_assert(c == NULL);
    ck_assert_msg(strstr(msg, path) != NULL, "message does not name the file: %s", msg);
    ck_assert_msg(strchr(msg, '\n') == NULL, "message not one line: %s", msg);
    if (frag1) ck_assert_msg(strstr(msg, frag1) != NULL, "message lacks \"%s\": %s", frag1, msg);
    if (frag2) ck_assert_msg(strstr(msg, frag2) != NULL, "message lacks \"%s\": %s", frag2, msg);
}

/* A hand-written file with two F32 tensors a [2] and b [3] (20 data bytes) and the given JSON body
 * template: %s receives the file's crc32 when the header starts with it, else the data's. */
static const float hand_data[5] = {1.0f, -2.0f, 0.5f, 3.0f, 4.0f};

static void write_hand(const char *path, const char *tmpl, size_t data_bytes) {
    uint8_t buf[64] = {0};
    memcpy(buf, hand_data, sizeof hand_data);
    char crc[9], json[2048];
    crc_hex(buf, data_bytes, crc);
    snprintf(json, sizeof json, tmpl, crc);
    write_st(path, json, buf, data_bytes, 0);
    if (strncmp(json, "{\"__metadata__\":{\"crc32\":\"", 26) == 0 && strncmp(json + 26, crc, 8) == 0 && json[34] == '"')
        seal(path); /* the template's %s is the checksum's place: the file's checksum goes there */
}

#define HAND_A "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"
#define HAND_B "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]}"
#define HAND_META "\"__metadata__\":{\"crc32\":\"%s\"}"

/* ---- the test model ---------------------------------------------------------------------------- */

typedef struct {
    float w[12];        /* F32 [3, 4] with special values */
    uint16_t h[5];      /* F16 [5] */
    uint16_t bf[12];    /* BF16 [2, 3, 2] */
    int32_t i[7];       /* I32 [7] */
    uint8_t u[11];      /* U8 [11] */
    float s;            /* F32 scalar, ndim 0 */
} model;

static void model_fill(model *m, uint64_t seed) {
    tests_rng r = {seed};
    for (int k = 0; k < 12; k++) m->w[k] = (float)tests_uniform(&r, -3, 3);
    uint32_t nan_payload = 0x7fc12345u, neg_zero = 0x80000000u, sub = 0x00000001u;
    memcpy(&m->w[0], &nan_payload, 4);
    memcpy(&m->w[1], &neg_zero, 4);
    memcpy(&m->w[2], &sub, 4);
    m->w[3] = -INFINITY;
    for (int k = 0; k < 5; k++) m->h[k] = (uint16_t)tests_next(&r);
    for (int k = 0; k < 12; k++) m->bf[k] = (uint16_t)tests_next(&r);
    for (int k = 0; k < 7; k++) m->i[k] = (int32_t)tests_next(&r);
    m->i[0] = INT32_MIN;
    for (int k = 0; k < 11; k++) m->u[k] = (uint8_t)tests_next(&r);
    m->s = (float)tests_uniform(&r, -1, 1);
}

/* The model's tensors; a zero-size tensor "empty" [0, 3] rides along. Names deliberately not sorted. */
static int model_tensors(const model *m, mpt_checkpoint_tensor t[7]) {
    memset(t, 0, 7 * sizeof *t);
    t[0] = (mpt_checkpoint_tensor){"fc2.weight", MPT_DTYPE_F32, 2, {3, 4}, m->w};
    t[1] = (mpt_checkpoint_tensor){"fc1.bias", MPT_DTYPE_F16, 1, {5}, m->h};
    t[2] = (mpt_checkpoint_tensor){"conv.weight", MPT_DTYPE_BF16, 3, {2, 3, 2}, m->bf};
    t[3] = (mpt_checkpoint_tensor){"step_counts", MPT_DTYPE_I32, 1, {7}, m->i};
    t[4] = (mpt_checkpoint_tensor){"mask", MPT_DTYPE_U8, 1, {11}, m->u};
    t[5] = (mpt_checkpoint_tensor){"scale", MPT_DTYPE_F32, 0, {0}, &m->s};
    t[6] = (mpt_checkpoint_tensor){"empty", MPT_DTYPE_F32, 2, {0, 3}, NULL};
    return 7;
}

static const mpt_checkpoint_meta model_meta[3] = {
    {"mptrain.precision", "bf16"}, {"epoch", "3"}, {"note", "caf\xc3\xa9 \"quoted\" \\ slash"}};

static void save_model(const char *path, uint64_t seed) {
    model m;
    model_fill(&m, seed);
    mpt_checkpoint_tensor t[7];
    int n = model_tensors(&m, t);
    ck_assert_msg(mpt_checkpoint_save(path, t, n, model_meta, 3) == MPT_OK, "%s", mpt_last_error());
}

/* Opens path against the model's expected list and checks every byte against model_fill(seed). */
static void check_model(const char *path, uint64_t seed) {
    model m, got;
    model_fill(&m, seed);
    memset(&got, 0xAB, sizeof got);
    mpt_checkpoint_tensor t[7];
    int n = model_tensors(&m, t);
    mpt_checkpoint *c = NULL;
    ck_assert_msg(mpt_checkpoint_open(path, t, n, &c) == MPT_OK, "%s", mpt_last_error());
    ck_assert_int_eq(mpt_checkpoint_n_tensors(c), 7);
    ck_assert(mpt_checkpoint_read(c, "fc2.weight", got.w, sizeof got.w) == MPT_OK);
    ck_assert(mpt_checkpoint_read(c, "fc1.bias", got.h, sizeof got.h) == MPT_OK);
    ck_assert(mpt_checkpoint_read(c, "conv.weight", got.bf, sizeof got.bf) == MPT_OK);
    ck_assert(mpt_checkpoint_read(c, "step_counts", got.i, sizeof got.i) == MPT_OK);
    ck_assert(mpt_checkpoint_read(c, "mask", got.u, sizeof got.u) == MPT_OK);
    ck_assert(mpt_checkpoint_read(c, "scale", &got.s, sizeof got.s) == MPT_OK);
    ck_assert(mpt_checkpoint_read(c, "empty", NULL, 0) == MPT_OK);
    ck_assert(memcmp(got.w, m.w, sizeof m.w) == 0);
    ck_assert(memcmp(got.h, m.h, sizeof m.h) == 0);
    ck_assert(memcmp(got.bf, m.bf, sizeof m.bf) == 0);
    ck_assert(memcmp(got.i, m.i, sizeof m.i) == 0);
    ck_assert(memcmp(got.u, m.u, sizeof m.u) == 0);
    ck_assert(memcmp(&got.s, &m.s, sizeof m.s) == 0);
    mpt_checkpoint_close(&c);
    ck_assert(c == NULL);
}

/* ---- round trip ------------------------------------------------------------------------------- */

START_TEST(test_roundtrip) {
    make_tmpdir();
    const char *p = tmp_path("model.safetensors");
    save_model(p, 42);
    check_model(p, 42);

    /* Metadata, tensor order (the order written), entries. */
    mpt_checkpoint *c = NULL;
    ck_assert_msg(mpt_checkpoint_open(p, NULL, 0, &c) == MPT_OK, "%s", mpt_last_error());
    ck_assert_str_eq(mpt_checkpoint_path(c), p);
    ck_assert_str_eq(mpt_checkpoint_meta_get(c, "mptrain.precision"), "bf16");
    ck_assert_str_eq(mpt_checkpoint_meta_get(c, "epoch"), "3");
    ck_assert_str_eq(mpt_checkpoint_meta_get(c, "note"), model_meta[2].value);
    ck_assert(mpt_checkpoint_meta_get(c, "absent") == NULL);
    ck_assert_int_eq(mpt_checkpoint_n_meta(c), 4);
    int seen_crc = 0;
    for (int i = 0; i < 4; i++) seen_crc += strcmp(mpt_checkpoint_meta_at(c, i).key, "crc32") == 0;
    ck_assert_int_eq(seen_crc, 1);
    model m;
    mpt_checkpoint_tensor t[7];
    model_fill(&m, 42);
    model_tensors(&m, t);
    for (int i = 0; i < 7; i++) {
        const mpt_checkpoint_tensor *e = mpt_checkpoint_tensor_at(c, i);
        ck_assert_str_eq(e->name, t[i].name);
        ck_assert_int_eq(e->dtype, t[i].dtype);
        ck_assert_int_eq(e->ndim, t[i].ndim);
        for (int d = 0; d < t[i].ndim; d++) ck_assert_int_eq(e->shape[d], t[i].shape[d]);
        ck_assert(mpt_checkpoint_find(c, t[i].name) == e);
    }
    ck_assert(mpt_checkpoint_find(c, "nope") == NULL);
    /* Reading into a buffer of the wrong size, or an absent tensor: errors naming both. */
    float small[3];
    ck_assert(mpt_checkpoint_read(c, "fc2.weight", small, sizeof small) == MPT_ERR_SHAPE);
    ck_assert_msg(strstr(mpt_last_error(), "fc2.weight") && strstr(mpt_last_error(), "48 bytes"), "%s", mpt_last_error());
    ck_assert(mpt_checkpoint_read(c, "nope", small, sizeof small) == MPT_ERR_SHAPE);
    ck_assert_msg(strstr(mpt_last_error(), "\"nope\"") != NULL, "%s", mpt_last_error());
    mpt_checkpoint_close(&c);

    /* The layout, checked by hand: u64 LE header length, data 8-aligned, buffer = concatenation in order,
     * the header starting with the crc32 of the whole file (its own digits read as 00000000). */
    size_t n;
    uint8_t *raw = read_all(p, &n);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)raw[i] << (8 * i);
    ck_assert((8 + hl) % 8 == 0);
    size_t data_bytes = 48 + 10 + 24 + 28 + 11 + 4;
    ck_assert_int_eq(n, 8 + hl + data_bytes);
    const uint8_t *buf = raw + 8 + hl;
    ck_assert(memcmp(buf, m.w, 48) == 0 && memcmp(buf + 48, m.h, 10) == 0 && memcmp(buf + 58, m.bf, 24) == 0);
    ck_assert(memcmp(buf + 82, m.i, 28) == 0 && memcmp(buf + 110, m.u, 11) == 0 && memcmp(buf + 121, &m.s, 4) == 0);
    char crc[9], needle[40];
    file_crc_hex(raw, n, crc);
    snprintf(needle, sizeof needle, "{\"__metadata__\":{\"crc32\":\"%s\"", crc);
    char *hdr = strndup((const char *)raw + 8, hl);
    ck_assert_msg(strncmp(hdr, needle, strlen(needle)) == 0, "header does not start with %s: %s", needle, hdr);
    ck_assert(strstr(hdr, "\"fc2.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,48]}") != NULL);
    ck_assert(strstr(hdr, "\"scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[121,125]}") != NULL);
    ck_assert(strstr(hdr, "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[125,125]}") != NULL);
    free(hdr), free(raw);
    rm_tmpdir();
}
END_TEST

/* The Python snippet of the header comment reads the file (skipped when python3 is absent). */
START_TEST(test_python_reads_it) {
    if (system("python3 -c 'import json, struct, zlib' >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_python_reads_it: SKIPPED: python3 not available\n");
        return;
    }
    make_tmpdir();
    const char *p = tmp_path("model.safetensors");
    save_model(p, 7);
    model m;
    model_fill(&m, 7);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 -c '\n"
             "import json, struct, zlib, sys\n"
             "raw = open(sys.argv[1], \"rb\").read()\n"
             "(n,) = struct.unpack(\"<Q\", raw[:8]); header = json.loads(raw[8:8 + n]); buf = raw[8 + n:]\n"
             "meta = header.pop(\"__metadata__\", {})\n"
             "assert zlib.crc32(raw[:34] + b\"00000000\" + raw[42:]) == int(meta[\"crc32\"], 16) == int(raw[34:42], 16)\n"
             "assert meta[\"epoch\"] == \"3\"\n"
             "t = header[\"fc2.weight\"]; b, e = t[\"data_offsets\"]\n"
             "w = struct.unpack(\"<%%df\" %% ((e - b) // 4), buf[b:e])\n"
             "assert t[\"shape\"] == [3, 4]\n"
             "t = header[\"step_counts\"]; b, e = t[\"data_offsets\"]\n"
             "i = struct.unpack(\"<7i\", buf[b:e])\n"
             "print(repr(w[5]), i[0], i[6])\n"
             "' %s",
             p);
    FILE *f = popen(cmd, "r");
    ck_assert(f != NULL);
    char line[256] = "";
    ck_assert(fgets(line, sizeof line, f) != NULL);
    ck_assert_int_eq(pclose(f), 0);
    double w5 = 0;
    long long i0 = 0, i6 = 0;
    ck_assert_int_eq(sscanf(line, "%lf %lld %lld", &w5, &i0, &i6), 3);
    ck_assert(w5 == (double)m.w[5]); /* Python's repr of a float is exact when parsed back */
    ck_assert(i0 == m.i[0] && i6 == m.i[6]);
    rm_tmpdir();
}
END_TEST

/* ---- corruption of a written file ------------------------------------------------------------- */

START_TEST(test_corrupt_written_file) {
    make_tmpdir();
    const char *p = tmp_path("good.safetensors");
    save_model(p, 1);
    size_t n;
    uint8_t *raw = read_all(p, &n);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)raw[i] << (8 * i);
    model m;
    mpt_checkpoint_tensor t[7];
    model_fill(&m, 1);
    model_tensors(&m, t);

    /* Flip one data byte: CRC mismatch. */
    const char *q = tmp_path("flip.safetensors");
    raw[8 + hl + 50] ^= 0x01;
    write_all(q, raw, n);
    expect_open_fail(q, t, 7, MPT_ERR_FORMAT, "CRC32 mismatch", "corrupt");
    raw[8 + hl + 50] ^= 0x01;
    /* A bit flipped in the header that leaves valid JSON with the same layout: a metadata value ("3" -> "1",
     * the kind of flip that changed a run's epochs or learning rate): refused by the checksum, which covers the
     * header (the data alone still matches its old checksum). */
    char *h = (char *)raw + 8;
    char *epoch = memmem(h, hl, "\"epoch\":\"3\"", 11);
    ck_assert(epoch != NULL);
    epoch[9] ^= 0x02; /* '3' -> '1' */
    write_all(q, raw, n);
    expect_open_fail(q, t, 7, MPT_ERR_FORMAT, "CRC32 mismatch", "settings, layout or tensors");
    epoch[9] ^= 0x02;

    /* Truncations: inside the length field, inside the header, inside the data, and the last byte. */
    write_all(q, raw, 5);
    expect_open_fail(q, t, 7, MPT_ERR_FORMAT, "too short", "5 bytes");
    write_all(q, raw, 8 + hl / 2);
    expect_open_fail(q, t, 7, MPT_ERR_FORMAT, "exceeds the", "truncated file?");
    write_all(q, raw, n - 1);
    expect_open_fail(q, t, 7, MPT_ERR_FORMAT, "beyond the end of the 124-byte data buffer", NULL);
    /* Trailing bytes. */
    uint8_t *longer = malloc(n + 3);
    memcpy(longer, raw, n);
    memcpy(longer + n, "xyz", 3);
    write_all(q, longer, n + 3);
    expect_open_fail(q, t, 7, MPT_ERR_FORMAT, "3 trailing bytes", NULL);
    free(longer);
    /* Header length field too large (beyond the limit), and larger than the file. */
    uint8_t save[8];
    memcpy(save, raw, 8);
    uint64_t big = 200ull * 1000 * 1000;
    for (int i = 0; i < 8; i++) raw[i] = (uint8_t)(big >> (8 * i));
    write_all(q, raw, n);
    expect_open_fail(q, t, 7, MPT_ERR_FORMAT, "header length 200000000 exceeds the 100000000-byte limit", NULL);
    big = n;
    for (int i = 0; i < 8; i++) raw[i] = (uint8_t)(big >> (8 * i));
    write_all(q, raw, n);
    expect_open_fail(q, t, 7, MPT_ERR_FORMAT, "exceeds the", "bytes after the length field");
    for (int i = 0; i < 8; i++) raw[i] = (uint8_t)(i == 0);
    write_all(q, raw, n);
    expect_open_fail(q, t, 7, MPT_ERR_FORMAT, "header length 1 is too small", NULL);
    memcpy(raw, save, 8);
    /* Not a file. */
    expect_open_fail(tmp_path("missing.safetensors"), t, 7, MPT_ERR_IO, "cannot open", NULL);
    expect_open_fail(tmpdir, t, 7, MPT_ERR_IO, "expected a regular file", NULL);
    free(raw);
    rm_tmpdir();
}
END_TEST

/* ---- hand-written headers --------------------------------------------------------------------- */

START_TEST(test_bad_headers) {
    make_tmpdir();
    const char *p = tmp_path("h.safetensors");
    /* The hand-written reference is itself valid. */
    write_hand(p, "{" HAND_META "," HAND_A "," HAND_B "}", 20);
    mpt_checkpoint *c = NULL;
    ck_assert_msg(mpt_checkpoint_open(p, NULL, 0, &c) == MPT_OK, "%s", mpt_last_error());
    float got[3];
    ck_assert(mpt_checkpoint_read(c, "b", got, sizeof got) == MPT_OK);
    ck_assert(got[0] == 0.5f && got[1] == 3.0f && got[2] == 4.0f);
    mpt_checkpoint_close(&c);
    /* Offsets need not follow the key order: b's data first is fine when they tile the buffer. */
    write_hand(p, "{" HAND_META ","
                  "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}", 20);
    ck_assert_msg(mpt_checkpoint_open(p, NULL, 0, &c) == MPT_OK, "%s", mpt_last_error());
    ck_assert_str_eq(mpt_checkpoint_tensor_at(c, 0)->name, "b");
    mpt_checkpoint_close(&c);

    struct {
        const char *json;
        const char *frag1, *frag2;
    } cases[] = {
        {"{" HAND_META "," HAND_A "," HAND_A "," HAND_B "}", "invalid JSON header", "duplicate"},
        {"{" HAND_META ",\"__metadata__\":{}," HAND_A "," HAND_B "}", "invalid JSON header", "duplicate"},
        {"{\"__metadata__\":{\"crc32\":\"%s\",\"crc32\":\"0\"}," HAND_A "," HAND_B "}", "duplicate", NULL},
        {"{" HAND_META "," HAND_A "," HAND_B, "invalid JSON header", NULL},
        {"[1,2]  %s", "invalid JSON header", NULL},
        {"[\"%s\"]", "expected a JSON object", NULL},
        {"{" HAND_META ",\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}," HAND_B "}",
         "unsupported dtype \"F64\"", "tensor \"a\""},
        {"{" HAND_META ",\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[4,16]}}", "overlap", "tensor \"b\""},
        {"{" HAND_META ",\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "gap", "tensor \"b\""},
        {"{" HAND_META ",\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "gap", "tensor \"a\""},
        {"{" HAND_META ",\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}," HAND_B "}", "begin <= end", NULL},
        {"{" HAND_META ",\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}," HAND_B "}", "0 <= begin", NULL},
        {"{" HAND_META "," HAND_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,24]}}", "beyond the end",
         NULL},
        {"{" HAND_META "," HAND_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,20]}}", "needs 8 bytes",
         "span 12"},
        {"{" HAND_META "," HAND_A "}", "12 trailing bytes", NULL},
        {"{" HAND_META "," HAND_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[8,20]}}",
         "overflows", NULL},
        {"{" HAND_META "," HAND_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[-3],\"data_offsets\":[8,20]}}", "shape[0]",
         "non-negative integer"},
        {"{" HAND_META "," HAND_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[8,20]}}", "shape[0]",
         "non-negative integer"},
        {"{" HAND_META "," HAND_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[1.5,2],\"data_offsets\":[8,20]}}", "shape[0]",
         NULL},
        {"{" HAND_META "," HAND_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,3],\"data_offsets\":[8,20]}}",
         "at most 8", NULL},
        {"{" HAND_META "," HAND_A ",\"b\":{\"dtype\":\"F32\",\"data_offsets\":[8,20]}}", "missing field \"shape\"", NULL},
        {"{" HAND_META "," HAND_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20],\"x\":1}}",
         "unexpected field \"x\"", NULL},
        {"{" HAND_META "," HAND_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8]}}", "[begin, end]", NULL},
        {"{" HAND_META "," HAND_A ",\"b\":[1]}", "expected an object", NULL},
        {"{\"__metadata__\":{\"crc32\":\"%s\",\"epoch\":3}," HAND_A "," HAND_B "}", "metadata \"epoch\"", "string"},
        {"{\"__metadata__\":{\"x\":\"%s\"}," HAND_A "," HAND_B "}", "no \"crc32\"", NULL},
        {"{\"__metadata__\":{\"crc32\":\"%s0\"}," HAND_A "," HAND_B "}", "8 hexadecimal digits", NULL},
        {"{\"__metadata__\":{\"crc32\":\"+%.7s\"}," HAND_A "," HAND_B "}", "8 hexadecimal digits", NULL},
        {"{\"__metadata__\":[\"%s\"]," HAND_A "," HAND_B "}", "must be an object", NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char name[64];
        snprintf(name, sizeof name, "case%zu.safetensors", k);
        const char *q = tmp_path(name);
        write_hand(q, cases[k].json, 20);
        expect_open_fail(q, NULL, 0, MPT_ERR_FORMAT, cases[k].frag1, cases[k].frag2);
    }
    /* Two tensors of the same size with their data_offsets swapped: a valid file with the wrong weights in
     * each, refused because the checksum covers the header. */
    write_hand(p, "{" HAND_META ",\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16);
    ck_assert_msg(mpt_checkpoint_open(p, NULL, 0, &c) == MPT_OK, "%s", mpt_last_error());
    mpt_checkpoint_close(&c);
    size_t n;
    uint8_t *raw = read_all(p, &n);
    char *oa = memmem(raw, n, "[0,8]", 5), *ob = memmem(raw, n, "[8,16]", 6);
    ck_assert(oa && ob && ob > oa);
    memmove(oa + 6, oa + 5, (size_t)(ob - oa - 5)); /* "[0,8]...[8,16]" -> "[8,16]...[0,8]", same length */
    memcpy(oa, "[8,16]", 6);
    memcpy(ob + 1, "[0,8]", 5);
    write_all(p, raw, n);
    expect_open_fail(p, NULL, 0, MPT_ERR_FORMAT, "CRC32 mismatch", NULL);
    free(raw);
    /* A file whose crc32 covers its data only (what mptrain wrote before the header was checksummed): refused,
     * saying so. */
    uint8_t hand[20];
    memcpy(hand, hand_data, sizeof hand);
    char dcrc[9], json[512];
    crc_hex(hand, 20, dcrc);
    snprintf(json, sizeof json, "{" HAND_META "," HAND_A "," HAND_B "}", dcrc);
    write_st(p, json, hand, 20, 0);
    expect_open_fail(p, NULL, 0, MPT_ERR_FORMAT, "covers the tensor data only", NULL);
    /* A header whose CRC is wrong by construction (crc of other data). */
    write_st(p, "{\"__metadata__\":{\"crc32\":\"00000000\"}," HAND_A "," HAND_B "}", hand_data, 20, 0);
    expect_open_fail(p, NULL, 0, MPT_ERR_FORMAT, "CRC32 mismatch", "header says 00000000");
    /* 7 bytes: too short for the 8-byte length field (a format error, before any read). */
    write_all(p, "\x02\0\0\0\0\0\0", 7);
    expect_open_fail(p, NULL, 0, MPT_ERR_FORMAT, "7 bytes is too short", NULL);
    /* Header length 0 and shorter than the JSON (cuts it). */
    write_st(p, "{}", NULL, 0, 0);
    ck_assert(mpt_checkpoint_open(p, NULL, 0, &c) == MPT_ERR_FORMAT); /* valid JSON, but no crc32 */
    ck_assert_msg(strstr(mpt_last_error(), "crc32"), "%s", mpt_last_error());
    rm_tmpdir();
}
END_TEST

/* ---- the expected tensor list ----------------------------------------------------------------- */

START_TEST(test_expected_list) {
    make_tmpdir();
    const char *p = tmp_path("m.safetensors");
    save_model(p, 3);
    model m;
    mpt_checkpoint_tensor t[8];
    model_fill(&m, 3);
    model_tensors(&m, t);
    /* Wrong shape, wrong dtype, wrong rank. */
    t[0].shape[1] = 5;
    expect_open_fail(p, t, 7, MPT_ERR_SHAPE, "tensor \"fc2.weight\": expected F32 [3, 5], found F32 [3, 4]", NULL);
    t[0].shape[1] = 4;
    t[1].dtype = MPT_DTYPE_BF16;
    expect_open_fail(p, t, 7, MPT_ERR_SHAPE, "tensor \"fc1.bias\": expected BF16 [5], found F16 [5]", NULL);
    t[1].dtype = MPT_DTYPE_F16;
    t[5].ndim = 1, t[5].shape[0] = 1;
    expect_open_fail(p, t, 7, MPT_ERR_SHAPE, "tensor \"scale\": expected F32 [1], found F32 []", NULL);
    t[5].ndim = 0;
    /* Missing (the model has a tensor the file lacks) and extra (the file has one the model lacks). */
    t[7] = (mpt_checkpoint_tensor){"fc3.weight", MPT_DTYPE_F32, 2, {10, 3}, NULL};
    expect_open_fail(p, t, 8, MPT_ERR_SHAPE, "missing 1 tensor the model needs: \"fc3.weight\"", NULL);
    expect_open_fail(p, t, 5, MPT_ERR_SHAPE, "2 unexpected tensors", "\"scale\", \"empty\"");
    /* Exactly the model: fine. */
    mpt_checkpoint *c = NULL;
    ck_assert_msg(mpt_checkpoint_open(p, t, 7, &c) == MPT_OK, "%s", mpt_last_error());
    mpt_checkpoint_close(&c);
    rm_tmpdir();
}
END_TEST

/* ---- writer argument errors ------------------------------------------------------------------- */

START_TEST(test_writer_errors) {
    make_tmpdir();
    const char *p = tmp_path("w.safetensors");
    float x[2] = {1, 2};
    mpt_checkpoint_tensor t[2] = {{"a", MPT_DTYPE_F32, 1, {2}, x}, {"a", MPT_DTYPE_F32, 1, {2}, x}};
    ck_assert(mpt_checkpoint_save(p, t, 2, NULL, 0) == MPT_ERR_ARG);
    ck_assert_msg(strstr(mpt_last_error(), "duplicate tensor name \"a\""), "%s", mpt_last_error());
    t[1].name = "__metadata__";
    ck_assert(mpt_checkpoint_save(p, t, 2, NULL, 0) == MPT_ERR_ARG);
    t[1].name = "";
    ck_assert(mpt_checkpoint_save(p, t, 2, NULL, 0) == MPT_ERR_ARG);
    t[1].name = "b";
    t[1].dtype = MPT_DTYPE_COUNT;
    ck_assert(mpt_checkpoint_save(p, t, 2, NULL, 0) == MPT_ERR_ARG);
    t[1].dtype = MPT_DTYPE_F32;
    t[1].shape[0] = -1;
    ck_assert(mpt_checkpoint_save(p, t, 2, NULL, 0) == MPT_ERR_ARG);
    t[1].shape[0] = 2;
    mpt_checkpoint_meta meta[2] = {{"crc32", "x"}, {"k", "v"}};
    ck_assert(mpt_checkpoint_save(p, t, 2, meta, 2) == MPT_ERR_ARG);
    ck_assert_msg(strstr(mpt_last_error(), "reserved"), "%s", mpt_last_error());
    meta[0].key = "k";
    ck_assert(mpt_checkpoint_save(p, t, 2, meta, 2) == MPT_ERR_ARG);
    ck_assert_msg(strstr(mpt_last_error(), "duplicate metadata key \"k\""), "%s", mpt_last_error());
    meta[1].value = "\xff\xfe";
    meta[0].key = "j";
    ck_assert(mpt_checkpoint_save(p, t, 2, meta, 2) == MPT_ERR_ARG);
    ck_assert_msg(strstr(mpt_last_error(), "UTF-8"), "%s", mpt_last_error());
    /* Nothing was written by any of the failures. */
    ck_assert(access(p, F_OK) != 0);
    ck_assert_int_eq(temp_files(tmpdir, "w.safetensors", NULL, 0), 0);
    /* An unwritable location: IO error naming the file and why. */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.safetensors", tmpdir);
    ck_assert(mpt_checkpoint_save(bad, t, 2, NULL, 0) == MPT_ERR_IO);
    ck_assert_msg(strstr(mpt_last_error(), "x.safetensors") && strstr(mpt_last_error(), "No such file"), "%s",
                  mpt_last_error());
    /* A symbolic link at the checkpoint's name (planted by another user in a shared directory): the link is
     * replaced by the checkpoint, the file it points to is not written. */
    const char *victim = tmp_path("victim"), *link = tmp_path("linked.safetensors");
    write_all(victim, "keep", 4);
    ck_assert(symlink(victim, link) == 0);
    ck_assert_msg(mpt_checkpoint_save(link, t, 1, NULL, 0) == MPT_OK, "%s", mpt_last_error());
    size_t vn;
    uint8_t *v = read_all(victim, &vn);
    ck_assert(vn == 4 && memcmp(v, "keep", 4) == 0);
    free(v);
    struct stat ls;
    ck_assert(lstat(link, &ls) == 0 && S_ISREG(ls.st_mode));
    /* The temporary file is created exclusively: a symbolic link (or any file) at the name it draws is never
     * written through; mpt_checkpoint_create_temp gives a new name, opened O_EXCL | O_NOFOLLOW. */
    int dfd = open(tmpdir, O_RDONLY | O_DIRECTORY);
    char t1[128], t2[128];
    int f1 = mpt_checkpoint_create_temp(dfd, "x", t1, sizeof t1), f2 = mpt_checkpoint_create_temp(dfd, "x", t2, sizeof t2);
    ck_assert(f1 >= 0 && f2 >= 0 && strcmp(t1, t2) != 0 && strncmp(t1, ".x.tmp-", 7) == 0 && strlen(t1) == 13);
    close(f1), close(f2);
    ck_assert(mpt_checkpoint_create_temp(dfd, "x", t1, 8) < 0 && errno == ENAMETOOLONG);
    close(dfd);
    rm_tmpdir();
}
END_TEST

/* ---- atomicity -------------------------------------------------------------------------------- */

START_TEST(test_crash_before_rename) {
    make_tmpdir();
    const char *p = tmp_path("ckpt.safetensors");
    save_model(p, 100);
    size_t n_old;
    uint8_t *old = read_all(p, &n_old);

    /* A process that dies between writing the temporary file and renaming it. */
    fflush(NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        model m;
        model_fill(&m, 200);
        mpt_checkpoint_tensor t[7];
        int n = model_tensors(&m, t);
        char tmp[600];
        if (mpt_checkpoint_write_temp(p, t, n, model_meta, 3, tmp, sizeof tmp) != MPT_OK) _exit(2);
        abort(); /* the crash */
    }
    int ws = 0;
    ck_assert(waitpid(pid, &ws, 0) == pid);
    ck_assert_msg(WIFSIGNALED(ws), "child did not crash as planned (exit %d)", WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);

    /* The old checkpoint is untouched and loads; the complete new one sits in the temp file. */
    size_t n_now;
    uint8_t *now = read_all(p, &n_now);
    ck_assert(n_now == n_old && memcmp(now, old, n_old) == 0);
    free(now);
    check_model(p, 100);
    char tmp[600];
    ck_assert_int_eq(temp_files(tmpdir, "ckpt.safetensors", tmp, sizeof tmp), 1);
    check_model(tmp, 200);

    /* The next save writes a temporary file of its own (never the crashed writer's, which may still be another
     * writer's), replaces the checkpoint and leaves the stale one for the caller to remove. */
    save_model(p, 300);
    check_model(p, 300);
    ck_assert(access(tmp, F_OK) == 0);
    ck_assert_int_eq(temp_files(tmpdir, "ckpt.safetensors", NULL, 0), 1);
    ck_assert(unlink(tmp) == 0);

    /* The two halves in-process: write_temp leaves path alone until commit. */
    model m;
    model_fill(&m, 400);
    mpt_checkpoint_tensor t[7];
    int n = model_tensors(&m, t);
    char tmp2[600];
    ck_assert(mpt_checkpoint_write_temp(p, t, n, model_meta, 3, tmp2, sizeof tmp2) == MPT_OK);
    ck_assert_int_eq(temp_files(tmpdir, "ckpt.safetensors", tmp, sizeof tmp), 1);
    ck_assert_str_eq(tmp2, tmp);
    check_model(p, 300);
    ck_assert_msg(mpt_checkpoint_commit(tmp2, p) == MPT_OK, "%s", mpt_last_error());
    check_model(p, 400);
    /* A temp-name buffer too small is an argument error, with nothing written. */
    char tiny[8];
    ck_assert(mpt_checkpoint_write_temp(p, t, n, model_meta, 3, tiny, sizeof tiny) == MPT_ERR_ARG);
    free(old);
    rm_tmpdir();
}
END_TEST

/* ---- durability and exclusivity: the writer's system calls, watched -------------------------------------------- */

/* fsync, renameat and getrandom as the writer (linked into this program) calls them: passed through to the kernel,
 * and while `watch` is set, recorded in order (an fsync by the path its descriptor names, /proc/self/fd) and, while
 * `fixed_random` >= 0, getrandom's bytes all equal to it (then it counts up): the temporary file's name is then
 * known in advance (".<name>.tmp-000000", then "-111111"), as an attacker who could predict it would know it. */
static int watch, fixed_random = -1, n_events;
static char events[16][600];

static void record(const char *fmt, const char *a, const char *b) {
    if (watch && n_events < 16) snprintf(events[n_events++], sizeof events[0], fmt, a, b);
}

int fsync(int fd) {
    char link[64], path[512] = "?";
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n >= 0) path[n] = '\0';
    record("fsync %s%s", path, "");
    return (int)syscall(SYS_fsync, fd);
}

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
    record("rename %s -> %s", oldpath, newpath);
    return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, 0);
}

/* read, passed through; while `shrunk_to` >= 0 the file reads as if another process had cut it to that many bytes
 * after the reader's fstat (read returns 0 at that offset). */
static long shrunk_to = -1;

ssize_t read(int fd, void *buf, size_t count) {
    if (shrunk_to >= 0) {
        off_t at = lseek(fd, 0, SEEK_CUR);
        if (at >= 0 && at >= shrunk_to) return 0;
        if (at >= 0 && (off_t)count > shrunk_to - at) count = (size_t)(shrunk_to - at);
    }
    return (ssize_t)syscall(SYS_read, fd, buf, count);
}

ssize_t getrandom(void *buf, size_t len, unsigned int flags) {
    if (fixed_random < 0) return (ssize_t)syscall(SYS_getrandom, buf, len, flags);
    memset(buf, fixed_random++, len);
    return (ssize_t)len;
}

/* engine/checkpoint.h's contract, by POSIX's rules: the temporary file is created with O_CREAT | O_EXCL (whatever
 * stands at its name, a file or a link to one, is never opened: EEXIST, and another name is drawn), its data reaches
 * the disk (fsync) before the rename makes it the checkpoint, and the directory is fsync'ed after the rename so that
 * the new name survives a power loss. A failed write or rename leaves the old checkpoint and no temporary file. */
START_TEST(test_durable_and_exclusive) {
    make_tmpdir();
    const char *p = tmp_path("ckpt.safetensors");
    save_model(p, 100);
    /* Another user's file, hard-linked at the name the writer will draw first. */
    const char *victim = tmp_path("victim"), *planted = tmp_path(".ckpt.safetensors.tmp-000000");
    write_all(victim, "keep", 4);
    ck_assert(link(victim, planted) == 0);
    model m;
    model_fill(&m, 200);
    mpt_checkpoint_tensor t[7];
    int n = model_tensors(&m, t);
    watch = 1, fixed_random = 0, n_events = 0;
    mpt_status st = mpt_checkpoint_save(p, t, n, model_meta, 3);
    watch = 0, fixed_random = -1;
    ck_assert_msg(st == MPT_OK, "%s", mpt_last_error());
    check_model(p, 200);
    size_t vn;
    uint8_t *v = read_all(victim, &vn);
    ck_assert_msg(vn == 4 && memcmp(v, "keep", 4) == 0, "the file at the temporary name was written through");
    free(v);
    ck_assert(access(planted, F_OK) == 0);
    /* fsync of the temporary file, its rename, then fsync of the directory, in that order. */
    char want[3][600];
    snprintf(want[0], sizeof want[0], "fsync %s/.ckpt.safetensors.tmp-111111", tmpdir);
    snprintf(want[1], sizeof want[1], "rename .ckpt.safetensors.tmp-111111 -> ckpt.safetensors");
    snprintf(want[2], sizeof want[2], "fsync %s", tmpdir);
    int at = 0;
    for (int i = 0; i < n_events && at < 3; i++)
        if (strcmp(events[i], want[at]) == 0) at++;
    char seen[16 * 610] = "";
    for (int i = 0; i < n_events; i++) snprintf(seen + strlen(seen), sizeof seen - strlen(seen), "[%s] ", events[i]);
    ck_assert_msg(at == 3, "expected [%s] then [%s] then [%s]; the writer did: %s", want[0], want[1], want[2], seen);
    ck_assert(unlink(planted) == 0);

    /* A write that fails (a file-size limit: EFBIG) loses nothing: the old checkpoint stays, no temporary file. */
    size_t n_old;
    uint8_t *old = read_all(p, &n_old);
    static float big[8192];
    mpt_checkpoint_tensor bt = {"big", MPT_DTYPE_F32, 1, {8192}, big};
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl;
    ck_assert(getrlimit(RLIMIT_FSIZE, &rl) == 0);
    struct rlimit small = {4096, rl.rlim_max};
    ck_assert(setrlimit(RLIMIT_FSIZE, &small) == 0);
    st = mpt_checkpoint_save(p, &bt, 1, NULL, 0);
    ck_assert(setrlimit(RLIMIT_FSIZE, &rl) == 0);
    ck_assert_msg(st == MPT_ERR_IO && strstr(mpt_last_error(), "ckpt.safetensors"), "%s", mpt_last_error());
    size_t n_now;
    uint8_t *now = read_all(p, &n_now);
    ck_assert(n_now == n_old && memcmp(now, old, n_old) == 0);
    free(now);
    free(old);
    ck_assert_int_eq(temp_files(tmpdir, "ckpt.safetensors", NULL, 0), 0);

    /* A rename that fails (a non-empty directory stands at the name: EISDIR) leaves no temporary file either. */
    const char *d = tmp_path("d.safetensors");
    ck_assert(mkdir(d, 0755) == 0);
    char inside[600];
    snprintf(inside, sizeof inside, "%s/x", d);
    write_all(inside, "x", 1);
    ck_assert(mpt_checkpoint_save(d, t, n, model_meta, 3) == MPT_ERR_IO);
    ck_assert_msg(strstr(mpt_last_error(), "d.safetensors") && strstr(mpt_last_error(), "rename"), "%s",
                  mpt_last_error());
    ck_assert_int_eq(temp_files(tmpdir, "d.safetensors", NULL, 0), 0);
    ck_assert(unlink(inside) == 0);

    /* A file cut short by another process while it is read (fstat said more bytes than read delivers): an IO error
     * naming it, never an endless loop (read returns 0 at the new end). */
    const long cuts[3] = {4, 20, (long)n_old - 1}; /* in the length field, the header, the data */
    for (int k = 0; k < 3; k++) {
        long cut = cuts[k];
        shrunk_to = cut;
        mpt_checkpoint *c = (mpt_checkpoint *)1;
        st = mpt_checkpoint_open(p, NULL, 0, &c);
        shrunk_to = -1;
        ck_assert_msg(st == MPT_ERR_IO && c == NULL && strstr(mpt_last_error(), "shrank"), "cut at %ld: %s", cut,
                      mpt_last_error());
    }
    rm_tmpdir();
}
END_TEST

int main(void) {
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("checkpoint");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_python_reads_it);
    tcase_add_test(tc, test_corrupt_written_file);
    tcase_add_test(tc, test_bad_headers);
    tcase_add_test(tc, test_expected_list);
    tcase_add_test(tc, test_writer_errors);
    tcase_add_test(tc, test_crash_before_rename);
    tcase_add_test(tc, test_durable_and_exclusive);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
