/* The background checkpoint writer (train/ckpt_writer.h): a submit never waits, one write at a
 * time, the newest image wins (an image still waiting is superseded), a failed write is reported
 * by the next call (and the file it would have replaced stays whole), the writer goes on after
 * it. The trainer's use of it - checkpoints written while the
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

DT_TEST(ckpt_writer_never_waits_and_the_newest_image_wins) {
    char path[700];
    snprintf(path, sizeof path, "%s/run.ckpt", dt_test_tmpdir());
    dt_ckpt_writer *w = dt_ckpt_writer_new();
    dt_err err;
    /* six of 16 MB each, made first, then submitted back to back: a submit is a hand-over
     * (microseconds), a write takes milliseconds, so the images submitted while the first is
     * written replace each other (made between the submits, under ASan each image took longer
     * than a write) */
    dt_ckpt_image imgs[6];
    for (int i = 0; i < 6; i++) {
        memset(&imgs[i], 0, sizeof imgs[i]);
        image_of((int64_t)1 << 22, (float)(i + 1), 10 * (i + 1), &imgs[i]);
    }
    for (int i = 0; i < 6; i++) {
        EXPECT_MSG(dt_ckpt_writer_submit(w, path, &imgs[i], &err) == 0, "write %d: %s", i + 1, err.msg);
        EXPECT(imgs[i].body == NULL); /* the writer took it */
    }
    double ms = -1;
    EXPECT_MSG(dt_ckpt_writer_wait(w, &ms, &err) == 0, "%s", err.msg);
    EXPECT(ms > 0);
    float v = 0;
    EXPECT_EQ_INT(step_of(path, &v), 60); /* the newest, whole */
    EXPECT(v == 6.0f);
    dt_ckpt_writer_counts c = dt_ckpt_writer_counts_of(w);
    EXPECT_EQ_INT(c.submitted, 6);
    EXPECT_EQ_INT(c.written + c.superseded, 6);
    EXPECT_MSG(c.superseded >= 1 && c.written >= 1, "%lld written, %lld superseded", (long long)c.written,
               (long long)c.superseded);
    char tmp[760];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    EXPECT_MSG(access(tmp, F_OK) != 0, "%s left behind", tmp);
    /* nothing in progress: waiting again is a no-op */
    EXPECT_EQ_INT(dt_ckpt_writer_wait(w, &ms, &err), 0);
    EXPECT(ms == 0);
    /* a written image's body comes back for the next snapshot, which fills it again */
    dt_ckpt_image img = {0};
    dt_ckpt_writer_spare(w, &img);
    EXPECT(img.body != NULL && img.cap >= ((size_t)1 << 24));
    unsigned char *body = img.body;
    image_of(1000, 7.0f, 70, &img);
    EXPECT(img.body == body);
    EXPECT_EQ_INT(dt_ckpt_writer_submit(w, path, &img, &err), 0);
    EXPECT_EQ_INT(dt_ckpt_writer_wait(w, NULL, &err), 0);
    EXPECT_EQ_INT(step_of(path, &v), 70);
    EXPECT(v == 7.0f);
    dt_ckpt_writer_free(w);
}

DT_TEST(ckpt_writer_reports_a_failed_write_at_the_next_call) {
    char good[700], bad[700];
    snprintf(good, sizeof good, "%s/good.ckpt", dt_test_tmpdir());
    snprintf(bad, sizeof bad, "%s/a_folder.ckpt", dt_test_tmpdir());
    EXPECT_EQ_INT(mkdir(bad, 0755), 0); /* a folder where the file should go: the rename fails */
    dt_ckpt_writer *w = dt_ckpt_writer_new();
    dt_err err;
    dt_ckpt_image img = {0};
    image_of(64, 1.0f, 2, &img);
    EXPECT_EQ_INT(dt_ckpt_writer_submit(w, good, &img, &err), 0);
    EXPECT_EQ_INT(dt_ckpt_writer_wait(w, NULL, &err), 0);
    /* the failing write is accepted; its failure is the next call's */
    image_of(64, 2.0f, 4, &img);
    EXPECT_EQ_INT(dt_ckpt_writer_submit(w, bad, &img, &err), 0); /* the target is checked in the writer */
    EXPECT_EQ_INT(dt_ckpt_writer_wait(w, NULL, &err), -1);
    EXPECT_MSG(strstr(err.msg, "checkpoint") && strstr(err.msg, "a_folder.ckpt"), "the failure's message: %s", err.msg);
    EXPECT_EQ_INT(dt_ckpt_writer_wait(w, NULL, &err), 0); /* reported once */
    float v = 0;
    EXPECT_EQ_INT(step_of(good, &v), 2); /* the good file is the first write's, whole */
    EXPECT(v == 1.0f);
    /* a failure seen by a submit: that image is freed unwritten */
    image_of(64, 3.0f, 6, &img);
    EXPECT_EQ_INT(dt_ckpt_writer_submit(w, bad, &img, &err), 0);
    for (int i = 0; i < 10000 && dt_ckpt_writer_counts_of(w).failed < 2; i++) usleep(1000); /* the write is done */
    EXPECT_EQ_INT(dt_ckpt_writer_counts_of(w).failed, 2);
    image_of(64, 3.5f, 7, &img);
    EXPECT_EQ_INT(dt_ckpt_writer_submit(w, good, &img, &err), -1);
    EXPECT_MSG(strstr(err.msg, "a_folder.ckpt"), "the failure's message: %s", err.msg);
    EXPECT(img.body == NULL); /* freed unwritten */
    EXPECT_EQ_INT(step_of(good, &v), 2);
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
