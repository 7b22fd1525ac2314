/* The background checkpoint writer (train/ckpt_writer.h): writes one at a time, the last one
 * wins, a failed write is reported at the next call (and the file it would have replaced stays
 * whole), the writer goes on after it. The trainer's use of it - checkpoints written while the
 * run goes on, an interrupt's checkpoint on disk before the run returns, a full disk - is in
 * tests/test_train.c (train_resume_is_bit_identical, train_write_failures_stop_the_run,
 * train_background_checkpoints_survive_an_interrupt). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dt_tensor.h"
#include "train/ckpt_writer.h"
#include "tests/dt_test.h"

/* The image of a checkpoint holding one tensor [n] of value v at step `step`. */
static void image_of(int64_t n, float v, int64_t step, dt_ckpt_image *img) {
    int64_t shape[1] = {n};
    dt_tensor *t = dt_tensor_new_unscoped(1, shape, DT_CPU, DT_F32, DT_NCHW);
    dt_tensor_fill(t, v);
    dt_ckpt_pos pos = {step / 2, step % 2, step};
    dt_ckpt_item it = {"w", t};
    dt_checkpoint_serialize("lr = 0.1\n", &pos, &it, 1, img);
    dt_tensor_free(t);
}

/* The step and first value of the checkpoint at path, or -1 when it does not read. */
static int64_t step_of(const char *path, float *v) {
    dt_checkpoint ck;
    dt_err err;
    if (dt_checkpoint_read(path, &ck, &err)) return -1;
    int64_t s = ck.pos.step;
    *v = NAN;
    if (ck.n == 1 && ck.shape[0][0] > 0) memcpy(v, ck.data[0], sizeof *v); /* the file's floats are not aligned */
    dt_checkpoint_free(&ck);
    return s;
}

DT_TEST(ckpt_writer_writes_in_the_background_one_at_a_time) {
    char path[700];
    snprintf(path, sizeof path, "%s/run.ckpt", dt_test_tmpdir());
    dt_ckpt_writer *w = dt_ckpt_writer_new();
    dt_err err;
    /* three in a row, 4 MB each: each submit waits for the one before, the last one wins */
    for (int i = 1; i <= 3; i++) {
        dt_ckpt_image img;
        image_of((int64_t)1 << 20, (float)i, 10 * i, &img);
        EXPECT_MSG(dt_ckpt_writer_submit(w, path, &img, &err) == 0, "write %d: %s", i, err.msg);
        EXPECT(img.body == NULL); /* the writer took it */
    }
    double ms = -1;
    EXPECT_MSG(dt_ckpt_writer_wait(w, &ms, &err) == 0, "%s", err.msg);
    EXPECT(ms >= 0);
    float v = 0;
    EXPECT_EQ_INT(step_of(path, &v), 30);
    EXPECT(v == 3.0f);
    char tmp[760];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    EXPECT_MSG(access(tmp, F_OK) != 0, "%s left behind", tmp);
    /* nothing in progress: waiting again is a no-op */
    EXPECT_EQ_INT(dt_ckpt_writer_wait(w, &ms, &err), 0);
    EXPECT(ms == 0);
    dt_ckpt_writer_free(w);
}

DT_TEST(ckpt_writer_reports_a_failed_write_at_the_next_call) {
    char good[700], bad[700];
    snprintf(good, sizeof good, "%s/good.ckpt", dt_test_tmpdir());
    snprintf(bad, sizeof bad, "%s/a_folder.ckpt", dt_test_tmpdir());
    EXPECT_EQ_INT(mkdir(bad, 0755), 0); /* a folder where the file should go: the rename fails */
    dt_ckpt_writer *w = dt_ckpt_writer_new();
    dt_err err;
    dt_ckpt_image img;
    image_of(64, 1.0f, 2, &img);
    EXPECT_EQ_INT(dt_ckpt_writer_submit(w, good, &img, &err), 0);
    EXPECT_EQ_INT(dt_ckpt_writer_wait(w, NULL, &err), 0);
    /* the failing write is started; its failure is the next submit's, which writes nothing */
    image_of(64, 2.0f, 4, &img);
    EXPECT_EQ_INT(dt_ckpt_writer_submit(w, bad, &img, &err), 0); /* the target is checked in the writer */
    image_of(64, 3.0f, 6, &img);
    EXPECT_EQ_INT(dt_ckpt_writer_submit(w, good, &img, &err), -1);
    EXPECT_MSG(strstr(err.msg, "checkpoint") && strstr(err.msg, "a_folder.ckpt"), "the failure's message: %s", err.msg);
    EXPECT(img.body == NULL); /* freed unwritten */
    float v = 0;
    EXPECT_EQ_INT(step_of(good, &v), 2); /* the good file is the first write's, whole */
    EXPECT(v == 1.0f);
    /* the writer goes on */
    image_of(64, 4.0f, 8, &img);
    EXPECT_EQ_INT(dt_ckpt_writer_submit(w, good, &img, &err), 0);
    EXPECT_MSG(dt_ckpt_writer_wait(w, NULL, &err) == 0, "%s", err.msg);
    EXPECT_EQ_INT(step_of(good, &v), 8);
    EXPECT(v == 4.0f);
    /* a failure that nobody collects before free: free waits and drops it, nothing leaks */
    image_of(64, 5.0f, 10, &img);
    dt_ckpt_writer_submit(w, bad, &img, &err);
    dt_ckpt_writer_free(w);
}
