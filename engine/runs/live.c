/* live.c - commands and files for a live run's guest: sb_runs_exec sends
 * EXEC and gathers EXEC_OUT until EXEC_EXIT; sb_runs_put sends PUT and
 * INPUT frames and waits for PUT_DONE (vmm/chan.h). Each op waits on its
 * run (r->ops) with a deadline of its own, since a guest may never
 * answer; once answered, the daemon records operator.exec or operator.cp
 * (source host, the client in by) with the output or the files as blobs,
 * then calls back. Everything runs on the daemon's loop.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/error.h"
#include "engine/log/blob.h"
#include "engine/mpack.h"
#include "engine/runs/run.h"
#include "vmm/chan.h"

#define LIVE_GRACE_S 10.0 /* the guest's time to answer past a command's timeout */
#define PUT_WAIT_S   60.0 /* ... to write a put's files */

struct sb_live_op {
	struct run *r;
	uint64_t id;
	int kind; /* SB_CHAN_EXEC or SB_CHAN_PUT */
	sb_watch *timer;
	double started;
	sb_live_fn cb;
	void *ctx;
	char by[128];
	/* exec */
	msgpack_sbuffer argv; /* packed, for the record */
	msgpack_sbuffer out[2];
	uint64_t max, stdin_len;
	int truncated;
	/* put: the caller's files, until the callback */
	const msgpack_object *files;
	struct sb_live_op *next;
};

static void op_free(struct sb_live_op *op)
{
	sb_watch_stop(op->timer);
	msgpack_sbuffer_destroy(&op->argv);
	msgpack_sbuffer_destroy(&op->out[0]);
	msgpack_sbuffer_destroy(&op->out[1]);
	free(op);
}

/* Takes op off its run's list. */
static void op_unlink(struct sb_live_op *op)
{
	for (struct sb_live_op **p = &op->r->ops; *p; p = &(*p)->next)
		if (*p == op) {
			*p = op->next;
			return;
		}
}

/* Answers op with error rc (its detail set) and frees it. */
static void op_fail(struct sb_live_op *op, int rc)
{
	struct sb_live_result res = {.rc = rc};

	op_unlink(op);
	op->cb(op->ctx, &res);
	op_free(op);
}

static void on_deadline(void *ctx)
{
	struct sb_live_op *op = ctx;

	sb_seterr(SB_ERR_TIMEOUT, "run %s: the guest did not answer the %s in time", op->r->id,
		  op->kind == SB_CHAN_EXEC ? "command" : "copy");
	op_fail(op, SB_ERR_TIMEOUT);
}

/* Ends every op of r waiting for its guest with SB_ERR_STATE: r ends. */
static void live_fail(struct run *r)
{
	while (r && r->ops) {
		sb_seterr(SB_ERR_STATE, "run %s ended before its guest answered", r->id);
		op_fail(r->ops, SB_ERR_STATE);
	}
}

/* A new op of r waiting for its guest for wait_s seconds, or NULL. */
static struct sb_live_op *op_new(struct run *r, int kind, const char *by, double wait_s,
				 sb_live_fn cb, void *ctx)
{
	struct sb_live_op *op = calloc(1, sizeof *op);
	sb_loop *loop = r->rs->env.loop;

	if (!op)
		return NULL;
	*op = (struct sb_live_op){.r = r, .id = ++r->rs->live_id, .kind = kind, .cb = cb,
				  .ctx = ctx, .started = sb_loop_now(loop)};
	snprintf(op->by, sizeof op->by, "%s", by ? by : "local");
	msgpack_sbuffer_init(&op->argv);
	msgpack_sbuffer_init(&op->out[0]);
	msgpack_sbuffer_init(&op->out[1]);
	if (!(op->timer = sb_loop_timer(loop, wait_s, 0, on_deadline, op))) {
		op_free(op);
		return NULL;
	}
	op->next = r->ops;
	r->ops = op;
	return op;
}

/* The live run id whose guest takes commands, or NULL (the error set). */
static struct run *live_run(struct sb_runs *rs, const char *id)
{
	struct run *r = sb_runs_find(rs, id);

	if (!r || r->st != SB_RUN_RUNNING || !r->g || !sb_guest_connected(r->g) || r->done) {
		sb_seterr(SB_ERR_STATE, "run %s is not running", id);
		return NULL;
	}
	if (!r->ready) {
		sb_seterr(SB_ERR_STATE, "run %s is not running yet: its guest is starting", id);
		return NULL;
	}
	return r;
}

/* ---- exec ---- */

/* Packs the EXEC frame of op for q into buf. Errors: SB_ERR_NOMEM,
 * SB_ERR_TOOBIG. */
static int exec_frame(const struct sb_live_op *op, const struct sb_exec_req *q,
		      msgpack_sbuffer *buf)
{
	msgpack_packer pk;
	size_t start;
	sb_mapw m;
	int rc;

	msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
	if ((rc = sb_chan_begin(buf, &pk, SB_CHAN_EXEC, op->id, &start)))
		return rc;
	sb_mapw_begin(&m, &pk);
	msgpack_pack_object(sb_mapw_key(&m, "argv"), *q->argv);
	if (q->stdin_data)
		sb_mapw_bin(&m, "stdin", q->stdin_data, q->stdin_len);
	sb_mapw_u64(&m, "timeout_ms", q->timeout_ms);
	sb_mapw_u64(&m, "output_max", q->output_max);
	if ((rc = sb_mapw_end(&m)))
		return rc;
	return sb_chan_end(buf, start);
}

/* Errors: SB_ERR_INVAL naming what in q is out of its bounds. */
static int exec_check(const struct sb_exec_req *q)
{
	const msgpack_object *a = q->argv;

	if (!a || a->type != MSGPACK_OBJECT_ARRAY || a->via.array.size < 1 ||
	    a->via.array.size > 1024)
		return sb_seterr(SB_ERR_INVAL, "argument 'argv' must be 1 to 1024 strings");
	for (uint32_t i = 0; i < a->via.array.size; i++)
		if (a->via.array.ptr[i].type != MSGPACK_OBJECT_STR ||
		    memchr(a->via.array.ptr[i].via.str.ptr, 0, a->via.array.ptr[i].via.str.size))
			return sb_seterr(SB_ERR_INVAL,
					 "argument 'argv' must be strings without NUL");
	if (q->stdin_len > SB_CHAN_EXEC_STDIN_MAX)
		return sb_seterr(SB_ERR_TOOBIG, "stdin is over 1 MiB");
	if (q->timeout_ms < 1 || q->timeout_ms > SB_EXEC_TIMEOUT_MAX_MS)
		return sb_seterr(SB_ERR_INVAL, "timeout must be 1 ms to 24 h");
	if (q->output_max > SB_CHAN_EXEC_OUTPUT_MAX)
		return sb_seterr(SB_ERR_INVAL, "output_max must be at most 16 MiB");
	return SB_OK;
}

int sb_runs_exec(struct sb_runs *rs, const struct sb_exec_req *q, sb_live_fn cb, void *ctx)
{
	struct sb_live_op *op;
	msgpack_sbuffer buf;
	msgpack_packer pk;
	struct run *r;
	int rc;

	if ((rc = exec_check(q)))
		return rc;
	if (!(r = live_run(rs, q->run)))
		return SB_ERR_STATE;
	if (!(op = op_new(r, SB_CHAN_EXEC, q->by, (double)q->timeout_ms / 1000 + LIVE_GRACE_S,
			  cb, ctx)))
		return sb_seterr(SB_ERR_NOMEM, "out of memory");
	op->max = q->output_max;
	op->stdin_len = q->stdin_data ? q->stdin_len : 0;
	msgpack_packer_init(&pk, &op->argv, msgpack_sbuffer_write);
	msgpack_pack_object(&pk, *q->argv);
	msgpack_sbuffer_init(&buf);
	rc = op->argv.data ? exec_frame(op, q, &buf) : SB_ERR_NOMEM;
	if (rc == SB_OK)
		sb_guest_send(r->g, buf.data, buf.size);
	msgpack_sbuffer_destroy(&buf);
	if (rc) {
		op_unlink(op);
		op_free(op);
		return sb_seterr(rc, "cannot send the command to the guest: %s", sb_errmsg(rc));
	}
	return SB_OK;
}

/* EXEC_OUT {stream, data}: kept up to op->max bytes a stream. */
static void exec_out(struct sb_live_op *op, const msgpack_object *body)
{
	const msgpack_object *data = sb_map_get(body, "data");
	char name[8];
	int i;
	size_t room, n;

	if (sb_map_str(body, "stream", name, sizeof name) < 0 || !data ||
	    data->type != MSGPACK_OBJECT_BIN)
		return; /* malformed: what EXEC_EXIT says is all the record keeps */
	i = !strcmp(name, "stdout") ? 0 : !strcmp(name, "stderr") ? 1 : -1;
	if (i < 0)
		return;
	room = op->out[i].size >= op->max ? 0 : op->max - op->out[i].size;
	n = data->via.bin.size < room ? data->via.bin.size : room;
	if (n < data->via.bin.size)
		op->truncated = 1;
	if (n)
		msgpack_sbuffer_write(&op->out[i], data->via.bin.ptr, n);
}

/* Packs the integer field key of the guest's body into m (dflt when it is
 * not one). */
static void copy_int(sb_mapw *m, const msgpack_object *body, const char *key, int64_t dflt)
{
	sb_mapw_i64(m, key, sb_map_i64(body, key, dflt));
}

/* Packs operator.exec's payload into m; keys[i] are the blob keys of the
 * masked output (out[i]), or "" for none. */
static void exec_payload(const struct sb_live_op *op, const msgpack_object *body,
			 const msgpack_sbuffer out[2], char keys[2][SB_HASH_HEX], sb_mapw *m)
{
	static const char *const names[2] = {"stdout", "stderr"};
	char err[256];

	sb_pack_raw(sb_mapw_key(m, "argv"), op->argv.data, op->argv.size);
	sb_mapw_str(m, "by", op->by);
	copy_int(m, body, "status", -1);
	sb_mapw_u64(m, "signal", sb_map_u64(body, "signal", 0));
	sb_mapw_bool(m, "timed_out", sb_map_bool(body, "timed_out", 0));
	sb_mapw_u64(m, "stdin_bytes", op->stdin_len);
	sb_mapw_u64(m, "stdout_bytes", sb_map_u64(body, "stdout_bytes", 0));
	sb_mapw_u64(m, "stderr_bytes", sb_map_u64(body, "stderr_bytes", 0));
	for (int i = 0; i < 2; i++)
		if (out[i].size)
			sb_mapw_str(m, names[i], keys[i]);
	sb_mapw_bool(m, "truncated", op->truncated);
	sb_mapw_u64(m, "duration_ms",
		    (uint64_t)((sb_loop_now(op->r->rs->env.loop) - op->started) * 1000));
	if (sb_map_str(body, "error", err, sizeof err) > 0)
		sb_mapw_str(m, "error", err);
}

/* The end of an exec or a put: unless res->rc already says it failed, the
 * payload m packs into payload is recorded as an event of type with its
 * nblobs blobs; then the caller hears res (with the event's offset) and op
 * is freed. */
static void op_finish(struct sb_live_op *op, const char *type, sb_mapw *m,
		      msgpack_sbuffer *payload, const struct sb_blob *blobs, size_t nblobs,
		      struct sb_live_result *res)
{
	struct sb_event ev;

	if (res->rc == SB_OK)
		res->rc = sb_mapw_end(m);
	if (res->rc == SB_OK)
		res->rc = sb_event_init(&ev, type, op->r->id, SB_SRC_HOST, payload->data,
					payload->size);
	if (res->rc == SB_OK)
		res->rc = sb_runs_append(op->r->rs, &ev, blobs, nblobs);
	res->offset = res->rc == SB_OK ? ev.offset : 0;
	op_unlink(op);
	op->cb(op->ctx, res);
	op_free(op);
}

/* EXEC_EXIT: the output masked, operator.exec recorded, the caller told. */
static void exec_exit(struct sb_live_op *op, const msgpack_object *body)
{
	struct sb_live_result res = {.exec = 1, .answer = body, .truncated = op->truncated};
	msgpack_sbuffer out[2], payload;
	char keys[2][SB_HASH_HEX] = {"", ""};
	struct sb_blob blobs[2];
	msgpack_packer pk;
	uint8_t hash[SB_HASH_LEN];
	size_t nblobs = 0;
	sb_mapw m;

	msgpack_sbuffer_init(&payload);
	/* the guest kept what output_max allows: it counted the rest */
	if (sb_map_u64(body, "stdout_bytes", 0) > op->out[0].size ||
	    sb_map_u64(body, "stderr_bytes", 0) > op->out[1].size)
		op->truncated = res.truncated = 1;
	for (int i = 0; i < 2; i++) {
		msgpack_sbuffer_init(&out[i]);
		if (op->out[i].size)
			sb_guest_mask_apply(op->r->g, op->out[i].data, op->out[i].size, &out[i]);
		if (op->out[i].size && !out[i].data)
			res.rc = SB_ERR_NOMEM;
		if (!out[i].size)
			continue;
		sb_blob_hash(out[i].data, out[i].size, hash);
		sb_hash_hex(hash, keys[i]);
		blobs[nblobs++] = (struct sb_blob){out[i].data, out[i].size};
		res.out[i] = out[i].data;
		res.out_len[i] = out[i].size;
	}
	msgpack_packer_init(&pk, &payload, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	exec_payload(op, body, out, keys, &m);
	op_finish(op, "operator.exec", &m, &payload, blobs, nblobs, &res);
	for (int i = 0; i < 2; i++)
		msgpack_sbuffer_destroy(&out[i]);
	msgpack_sbuffer_destroy(&payload);
}

/* ---- put ---- */

/* The fields of file i of a put: its path, mode and data. Errors:
 * SB_ERR_INVAL naming the file. */
static int put_file(const msgpack_object *f, uint32_t i, const msgpack_object **path,
		    uint64_t *mode, const msgpack_object **data)
{
	const msgpack_object *m = sb_map_get(f, "mode");
	const msgpack_object *p = sb_map_get(f, "path");
	uint64_t fmt;

	*data = sb_map_get(f, "data");
	*path = p;
	*mode = 0;
	if (!p || p->type != MSGPACK_OBJECT_STR || !sb_plan_path_ok(p->via.str.ptr, p->via.str.size))
		return sb_seterr(SB_ERR_INVAL,
				 "files[%u]: path must be relative to /workspace, without "
				 "'.' or '..' parts",
				 i);
	if (!m || m->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return sb_seterr(SB_ERR_INVAL, "files[%u]: mode must be an integer", i);
	*mode = m->via.u64;
	fmt = *mode & S_IFMT;
	if ((fmt && fmt != S_IFREG && fmt != S_IFLNK && fmt != S_IFDIR) || (*mode & ~(uint64_t)(S_IFMT | 07777)))
		return sb_seterr(SB_ERR_INVAL, "files[%u]: mode is not a file's, a link's or a directory's", i);
	if (*data && (*data)->type != MSGPACK_OBJECT_BIN)
		return sb_seterr(SB_ERR_INVAL, "files[%u]: data must be bytes", i);
	if (fmt == S_IFDIR && *data && (*data)->via.bin.size)
		return sb_seterr(SB_ERR_INVAL, "files[%u]: a directory has no data", i);
	if (fmt == S_IFLNK && (!*data || !(*data)->via.bin.size || (*data)->via.bin.size >= 4096))
		return sb_seterr(SB_ERR_INVAL, "files[%u]: a link's target must be 1 to 4095 bytes", i);
	return SB_OK;
}

/* Packs the PUT frame for files and their INPUT frames into buf. Errors:
 * those of put_file, SB_ERR_TOOBIG, SB_ERR_NOMEM. */
static int put_frames(uint64_t id, const msgpack_object *files, msgpack_sbuffer *buf)
{
	const msgpack_object *path, *data;
	uint64_t mode, total = 0;
	msgpack_packer pk;
	size_t start;
	int rc;

	msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
	if ((rc = sb_chan_begin(buf, &pk, SB_CHAN_PUT, id, &start)))
		return rc;
	msgpack_pack_map(&pk, 1);
	sb_pack_str(&pk, "inputs");
	msgpack_pack_array(&pk, files->via.array.size);
	for (uint32_t i = 0; i < files->via.array.size; i++) {
		if ((rc = put_file(&files->via.array.ptr[i], i, &path, &mode, &data)))
			return rc;
		total += data ? data->via.bin.size : 0;
		if (total > SB_CHAN_INPUTS_MAX)
			return sb_seterr(SB_ERR_TOOBIG, "the files are over 48 MiB in all");
		msgpack_pack_map(&pk, 3);
		sb_pack_kstrn(&pk, "path", path->via.str.ptr, path->via.str.size);
		sb_pack_ku64(&pk, "size", data ? data->via.bin.size : 0);
		sb_pack_ku64(&pk, "mode", (mode & S_IFMT) == S_IFREG ? mode & 07777 : mode);
	}
	if ((rc = sb_chan_end(buf, start)))
		return rc;
	for (uint32_t i = 0; i < files->via.array.size; i++) {
		data = sb_map_get(&files->via.array.ptr[i], "data");
		if (data && (rc = sb_chan_pack_input(buf, i, data->via.bin.ptr, data->via.bin.size)))
			return rc;
	}
	return SB_OK;
}

int sb_runs_put(struct sb_runs *rs, const struct sb_put_req *q, sb_live_fn cb, void *ctx)
{
	const msgpack_object *f = q->files;
	struct sb_live_op *op;
	msgpack_sbuffer buf;
	struct run *r;
	int rc;

	if (!f || f->type != MSGPACK_OBJECT_ARRAY || f->via.array.size < 1 ||
	    f->via.array.size > SB_CHAN_INPUT_FILES)
		return sb_seterr(SB_ERR_INVAL, "argument 'files' must be 1 to 1024 files");
	if (!(r = live_run(rs, q->run)))
		return SB_ERR_STATE;
	if (!(op = op_new(r, SB_CHAN_PUT, q->by, PUT_WAIT_S, cb, ctx)))
		return sb_seterr(SB_ERR_NOMEM, "out of memory");
	op->files = f;
	msgpack_sbuffer_init(&buf);
	if ((rc = put_frames(op->id, f, &buf)) == SB_OK)
		sb_guest_send(r->g, buf.data, buf.size);
	msgpack_sbuffer_destroy(&buf);
	if (rc) {
		op_unlink(op);
		op_free(op);
	}
	return rc;
}

/* Packs operator.cp's payload into m (the files with their contents'
 * keys, which blobs get) from op and the guest's PUT_DONE body. */
static int put_payload(const struct sb_live_op *op, const msgpack_object *body, sb_mapw *m,
		       struct sb_blob *blobs, size_t *nblobs)
{
	const msgpack_object *fs = op->files, *sk = sb_map_get(body, "skipped_paths");
	char key[SB_HASH_HEX], err[256];
	uint8_t hash[SB_HASH_LEN];
	msgpack_packer *pk;
	sb_mapw fm;

	sb_mapw_str(m, "by", op->by);
	pk = sb_mapw_key(m, "files");
	msgpack_pack_array(pk, fs->via.array.size);
	for (uint32_t i = 0; i < fs->via.array.size; i++) {
		const msgpack_object *p = sb_map_get(&fs->via.array.ptr[i], "path");
		const msgpack_object *d = sb_map_get(&fs->via.array.ptr[i], "data");
		uint64_t mode = sb_map_u64(&fs->via.array.ptr[i], "mode", 0);
		size_t n = d ? d->via.bin.size : 0;

		sb_mapw_begin(&fm, pk);
		sb_mapw_strn(&fm, "path", p->via.str.ptr, p->via.str.size);
		sb_mapw_str(&fm, "kind", S_ISDIR(mode) ? "dir" : S_ISLNK(mode) ? "symlink" : "file");
		sb_mapw_u64(&fm, "mode", mode & 07777);
		sb_mapw_u64(&fm, "size", n);
		if (!S_ISDIR(mode)) {
			sb_blob_hash(n ? d->via.bin.ptr : "", n, hash);
			sb_hash_hex(hash, key);
			sb_mapw_str(&fm, "content", key);
			blobs[(*nblobs)++] = (struct sb_blob){n ? d->via.bin.ptr : "", n};
		}
		if (sb_mapw_end(&fm))
			return SB_ERR_NOMEM;
	}
	sb_mapw_u64(m, "written", sb_map_u64(body, "files", 0));
	sb_mapw_u64(m, "bytes", sb_map_u64(body, "bytes", 0));
	if (sb_map_u64(body, "skipped", 0))
		sb_mapw_u64(m, "skipped", sb_map_u64(body, "skipped", 0));
	if (sk && sk->type == MSGPACK_OBJECT_ARRAY && sk->via.array.size <= 8)
		msgpack_pack_object(sb_mapw_key(m, "skipped_paths"), *sk);
	if (sb_map_str(body, "error", err, sizeof err) > 0)
		sb_mapw_str(m, "error", err);
	return SB_OK;
}

/* PUT_DONE: operator.cp recorded, the caller told. */
static void put_done(struct sb_live_op *op, const msgpack_object *body)
{
	struct sb_live_result res = {.answer = body};
	struct sb_blob *blobs = calloc(op->files->via.array.size, sizeof *blobs);
	msgpack_sbuffer payload;
	msgpack_packer pk;
	size_t nblobs = 0;
	sb_mapw m;

	msgpack_sbuffer_init(&payload);
	msgpack_packer_init(&pk, &payload, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	res.rc = blobs ? put_payload(op, body, &m, blobs, &nblobs) : SB_ERR_NOMEM;
	op_finish(op, "operator.cp", &m, &payload, blobs, nblobs, &res);
	free(blobs);
	msgpack_sbuffer_destroy(&payload);
}

/* The guest answered (EXEC_OUT, EXEC_EXIT, PUT_DONE) op stream of r. */
static void live_answer(struct run *r, int kind, uint64_t stream, const msgpack_object *body)
{
	struct sb_live_op *op = r->ops;

	while (op && op->id != stream)
		op = op->next;
	if (!op || body->type != MSGPACK_OBJECT_MAP)
		return; /* not asked for (or given up): dropped */
	if (kind == SB_CHAN_EXEC_OUT && op->kind == SB_CHAN_EXEC)
		exec_out(op, body);
	else if (kind == SB_CHAN_EXEC_EXIT && op->kind == SB_CHAN_EXEC)
		exec_exit(op, body);
	else if (kind == SB_CHAN_PUT_DONE && op->kind == SB_CHAN_PUT)
		put_done(op, body);
}

const struct sb_run_live_ops sb_run_live_ops = {
	.answer = live_answer,
	.fail = live_fail,
};
