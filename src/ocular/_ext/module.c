/* module.c -- the binding layer of ocular._ocular: argument conversion, session start and stop
 * (recording), rendering a recording, the fork hooks and test hooks.  Validation of user input happens in the Python package (ocular/__init__.py);
 * this layer re-checks types and never trusts them blindly.  sys.monitoring registration also lives
 * in Python; this module hands out the C callbacks.
 */
#include "ocular.h"
#include "deflate.h"
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <pthread.h>
#include <stdint.h>

static void hooks_set(void); /* (below) */

static void free_strv(char **v) {
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

static char *dup_utf8(PyObject *s) {
    if (!PyUnicode_Check(s)) {
        PyErr_SetString(PyExc_TypeError, "expected str");
        return NULL;
    }
    PyObject *b = PyUnicode_AsEncodedString(s, "utf-8", "surrogateescape");
    if (!b)
        return NULL;
    char *r = strdup(PyBytes_AS_STRING(b));
    Py_DECREF(b);
    if (!r)
        PyErr_NoMemory();
    return r;
}

static char **strv_from_tuple(PyObject *t) {
    if (!PyTuple_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "filters must be a tuple of str");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    char **v = calloc((size_t)n + 1, sizeof(char *));
    if (!v) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        v[i] = dup_utf8(PyTuple_GET_ITEM(t, i));
        if (!v[i]) {
            free_strv(v);
            return NULL;
        }
    }
    return v;
}

static void free_session_strings(void) {
    free_strv(sess.include_only);
    free_strv(sess.exclude);
    free(sess.own_dir);
    free(sess.out_path);
    free(sess.tmp_path);
    free(sess.process_name);
    free(sess.process_name_raw);
    free(sess.rec_path);
    sess.include_only = sess.exclude = NULL;
    sess.own_dir = sess.out_path = sess.tmp_path = sess.process_name = sess.process_name_raw = sess.rec_path = NULL;
}

static int set_paths(PyObject *out, PyObject *tmp, PyObject *rec) {
    free(sess.out_path);
    free(sess.tmp_path);
    free(sess.rec_path);
    sess.out_path = sess.tmp_path = sess.rec_path = NULL;
    if (!(sess.rec_path = dup_utf8(rec)))
        return -1;
    if (out == Py_None)
        return 0;
    sess.out_path = dup_utf8(out);
    sess.tmp_path = sess.out_path ? dup_utf8(tmp) : NULL;
    return sess.tmp_path ? 0 : -1;
}

static void reset_counters(void) {
    sess.dropped = 0;
    sess.internal_error = 0;
    sess.internal_msg[0] = 0;
    sess.write_errno = 0;
    sess.bytes_written = 0;
    sess.calibrated = sess.early_calibrated = 0;
    sess.ns_per_tick = sess.early_npt = 1.0;
    sess.knee_tsc = UINT64_MAX;
    sess.stopping = 0;
    sess.pauses = 0;
    sess.recorder_idle = 0;
    sess.ncodes_pub = 0;
    sess.nqueued = 0;
    sess.threads_named = sess.threads_named_seen = 0;
}

PyDoc_STRVAR(start_doc,
             "_start(*, precise, threshold, output, tmp_output, include_only, exclude, own_dir,\n"
             "       cache_entries, process_name, disable, main_ident, format, recording, ring_bytes,\n"
             "       loops=0, c_functions=False, near_zero=False, stall_ms=0) -> dict of callbacks\n\n"
             "Keyword arguments only (_ocular.pyi has their types).  "
             "Start a session recording into `recording` (ring_bytes > 0: kept in memory, the newest\n"
             "ring_bytes only, written there at stop).  output/tmp_output/format (0 JSON, 1 Perfetto,\n"
             "2 none) are what a fork child orphaned by its thread renders by itself.  near_zero: function\n"
             "starts are de-instrumented after `threshold` too (else only jump, instruction and C call\n"
             "sites are).  stall_ms: an asyncio task step this long is a loop stall (0: the renderer's\n"
             "default, 100), written in the recording.  Internal: use\n"
             "ocular.start_tracing(), which validates arguments and registers the callbacks.");

static PyObject *py_start(PyObject *mod, PyObject *args, PyObject *kwargs) {
    (void)mod;
    static char *kw[] = {"precise", "threshold", "output", "tmp_output", "include_only", "exclude", "own_dir",
                         "cache_entries", "process_name", "disable", "main_ident", "format", "recording",
                         "ring_bytes", "loops", "c_functions", "near_zero", "stall_ms", NULL};
    enum { NREQUIRED = 14 }; /* (all but the last four) */
    int precise = -1;
    unsigned long threshold = ULONG_MAX;
    unsigned long main_ident = ULONG_MAX;
    int format = -1;
    unsigned long long ring = ULLONG_MAX;
    int loops = OC_LOOPS_ITERATIONS, c_functions = 0, near_zero = 0;
    unsigned int stall_ms = 0;
    PyObject *out = NULL, *tmp = NULL, *inc = NULL, *exc = NULL, *own = NULL, *cache = NULL, *pname = NULL,
             *disable = NULL, *rec = NULL;
    if (PyTuple_GET_SIZE(args)) {
        PyErr_SetString(PyExc_TypeError, "_start() takes keyword arguments only");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$pkOOO!O!UO!UOkiUKippI:_start", kw, &precise, &threshold, &out,
                                     &tmp, &PyTuple_Type, &inc, &PyTuple_Type, &exc, &own, &PyBytes_Type, &cache,
                                     &pname, &disable, &main_ident, &format, &rec, &ring, &loops, &c_functions,
                                     &near_zero, &stall_ms))
        return NULL;
    for (int i = 0; i < NREQUIRED; i++) /* (keyword-only arguments are optional to the parser) */
        if (!kwargs || !PyDict_GetItemString(kwargs, kw[i])) {
            PyErr_Format(PyExc_TypeError, "_start() missing required keyword argument '%s'", kw[i]);
            return NULL;
        }
    if (format != OC_FORMAT_STATS && !(oc_format_caps(format) & OC_CAP_TRACE)) {
        PyErr_Format(PyExc_ValueError, "unknown trace format %d", format);
        return NULL;
    }
    if (sess.active) {
        PyErr_SetString(PyExc_RuntimeError, "ocular: tracing is already running");
        return NULL;
    }
    if (PyBytes_GET_SIZE(cache) != 256) {
        PyErr_SetString(PyExc_ValueError, "cache_entries must have 256 bytes");
        return NULL;
    }
    if (threshold > 0xFFFFFFF0ul) {
        PyErr_SetString(PyExc_OverflowError, "deinstrument_threshold is too large");
        return NULL;
    }
    oc_codetable_clear();
    oc_tasks_reset(); /* (task names' code ids are the last session's) */
    free_session_strings();
    reset_counters();
    oc_sampling_reset();
    sess.include_only = strv_from_tuple(inc);
    sess.exclude = sess.include_only ? strv_from_tuple(exc) : NULL;
    sess.own_dir = sess.exclude ? dup_utf8(own) : NULL;
    char *pn = sess.own_dir ? dup_utf8(pname) : NULL;
    if (!pn || set_paths(out, tmp, rec) < 0) {
        free(pn);
        free_session_strings();
        return NULL;
    }
    sess.process_name = oc_json_escape(pn, (Py_ssize_t)strlen(pn));
    sess.process_name_raw = pn;
    sess.ring_bytes = (size_t)ring;
    sess.loops = loops >= 0 && loops <= 2 ? loops : OC_LOOPS_ITERATIONS;
    memcpy(sess.cache_entries, PyBytes_AS_STRING(cache), 256);
    sess.precise = precise;
    sess.threshold = (uint32_t)threshold;
    sess.fn_threshold = near_zero ? sess.threshold : 0;
    sess.stall_ms = stall_ms;
    atomic_store(&sess.own_cost_set, 0);
    sess.ccall_keep_ticks = 0;
    atomic_store(&sess.ccall_cap_ticks, UINT64_MAX);
    sess.insn_limit = sess.threshold; /* (precise mode; _probes() sets adaptive mode's) */
    sess.probe_after = 0;
    sess.write_json = out != Py_None && format != OC_FORMAT_STATS;
    sess.format = format;
    Py_XSETREF(sess.disable, Py_NewRef(disable));
    sess.main_ident = main_ident;
    sess.pid = (long)getpid();
    for (uint32_t i = 0; i < sess.nthreads; i++) { /* the last session's thread names */
        free(sess.threads[i].name);
        free(sess.threads[i].name_raw);
        sess.threads[i].name = sess.threads[i].name_raw = NULL;
    }
    sess.nthreads = 0;
    sess.gen++;
    oc_buffer_reset();
    sess.c_functions = c_functions;
    PyObject *cbs = oc_make_callbacks(c_functions);
    if (!cbs)
        return NULL;
    oc_clock_init();
    oc_clock_sample(&sess.tsc0, &sess.mono0_ns);
    hooks_set();
    if (oc_recorder_start() < 0) {
        Py_DECREF(cbs);
        return NULL;
    }
    sess.active = 1;
    return cbs;
}

PyDoc_STRVAR(stop_doc, "_stop() -> dict\n\nEnd the session (callbacks must already be unregistered): "
                       "flush every thread, finish the recording, return the session's figures.");

/* A pending call (Python's main thread, GIL held): ocular._recording_failed(err) says so on stderr.  Never
 * raises into the program: whatever goes wrong is dropped. */
static int recording_failed_call(void *arg) {
    PyObject *exc = PyErr_GetRaisedException();
    PyObject *mod = PyImport_ImportModule("ocular");
    PyObject *r = mod ? PyObject_CallMethod(mod, "_recording_failed", "i", (int)(intptr_t)arg) : NULL;
    Py_XDECREF(r);
    Py_XDECREF(mod);
    PyErr_Clear();
    PyErr_SetRaisedException(exc);
    return 0;
}

static void notify_recording_failed(int err) {
    if (Py_IsInitialized())
        (void)Py_AddPendingCall(recording_failed_call, (void *)(intptr_t)err);
}

/* a render while recording, for the trace formats (what it can render early) */
static void live_start(const char *rec_path, int format, const char *out_path, int loops) {
    if (oc_format_caps(format) & OC_CAP_TRACE)
        oc_render_live_start(rec_path, format, out_path, loops);
}

/* the record side's hooks (session.h, oc_session.hooks): set before the recorder starts */
static void hooks_set(void) {
    sess.hooks.recording_failed = notify_recording_failed;
    sess.hooks.render = oc_render_file;
    sess.hooks.live_start = live_start;
}

static PyObject *py_stop(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    /* (a SIGTERM from now on waits for the end of the stop: ocular's _signals_disarm) */
    if (!oc_signals_stopping() && sess.writer_started) {
        /* the recorder took a SIGTERM over (sigsave.c): it saves the trace and ends the process by the
         * signal, which must not be an exit of the program's own meanwhile */
        Py_BEGIN_ALLOW_THREADS
        pthread_join(sess.writer, NULL);
        Py_END_ALLOW_THREADS
    }
    if (!sess.active) {
        PyErr_SetString(PyExc_RuntimeError, "ocular: tracing is not running");
        return NULL;
    }
    oc_sampling_stop();
    oc_tasks_reset();
    Py_CLEAR(sess.set_local_events);
    Py_CLEAR(sess.arm_calls);
    sess.probe_after = 0;
    uint64_t stop_ticks = oc_now();
    oc_buffer_flush_all();
    oc_codetable_snapshot();
    sess.active = 0;
    Py_BEGIN_ALLOW_THREADS
    oc_recorder_stop(stop_ticks);
    Py_END_ALLOW_THREADS
    /* paths were encoded with surrogateescape: decode them the same way (non-UTF-8 file names) */
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:i,s:s,s:s,s:d,s:I,s:I,s:N,s:N,s:N}",
                         "events", (unsigned long long)oc_recorder_events(),
                         "pauses", (unsigned long long)sess.pauses,
                         "dropped", (unsigned long long)sess.dropped,
                         "bytes", (unsigned long long)sess.bytes_written,
                         "write_errno", sess.write_errno,
                         "internal_error", sess.internal_error ? sess.internal_msg : "",
                         "clock", oc_clock_source(),
                         "ns_per_tick", sess.ns_per_tick,
                         "codes", sess.ncodes,
                         "threads", sess.nthreads,
                         "output", PyUnicode_DecodeFSDefault(sess.out_path ? sess.out_path : ""),
                         "tmp_output", PyUnicode_DecodeFSDefault(sess.tmp_path ? sess.tmp_path : ""),
                         "recording", PyUnicode_DecodeFSDefault(sess.rec_path ? sess.rec_path : ""));
}

PyDoc_STRVAR(render_doc,
             "_render(recording, format, output, progress, loops=0, stats=True) -> dict\n\n"
             "Render a recording (a path) into output (a path, or None) as format 0 Chrome JSON,\n"
             "1 Perfetto protobuf, 2 nothing (statistics only; _report_data() has them afterwards),\n"
             "3 the call tree (no output; _calltree() has it afterwards) or 4 speedscope JSON.\n"
             "progress: show a progress line on stderr (a terminal) when it takes over a second.\n"
             "loops: 0 an instant per iteration, 1 a slice per loop run, 2 nothing.\n"
             "stats: false renders a trace format (0, 1) alone: no statistics are kept, and\n"
             "_report_data() has none afterwards.\n"
             "The dict has the render's figures and the recording's pid, process_name (as recorded, or None),\n"
             "clock, ns_per_tick, precise and python_hex (the recorded interpreter's PY_VERSION_HEX), and damaged\n"
             "(what was repaired to render a damaged recording, one line, or None).\n"
             "Raises ValueError for a file that is not a readable recording.");

static PyObject *py_render(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *rec_o, *out_o;
    int format, progress, loops = OC_LOOPS_ITERATIONS, stats = 1;
    if (!PyArg_ParseTuple(args, "O&iOp|ip:_render", PyUnicode_FSConverter, &rec_o, &format, &out_o, &progress, &loops,
                          &stats))
        return NULL;
    PyObject *outb = NULL;
    if (out_o != Py_None && !PyUnicode_FSConverter(out_o, &outb)) {
        Py_DECREF(rec_o);
        return NULL;
    }
    if (!oc_format_known(format) || loops < 0 || loops > 2) {
        Py_DECREF(rec_o);
        Py_XDECREF(outb);
        PyErr_Format(PyExc_ValueError, "unknown format %d or loops %d", format, loops);
        return NULL;
    }
    oc_render_result res;
    int rc;
    const char *rec = PyBytes_AS_STRING(rec_o), *out = outb ? PyBytes_AS_STRING(outb) : NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = oc_render_file(rec, format, out, progress, loops, stats, &res);
    Py_END_ALLOW_THREADS
    Py_DECREF(rec_o);
    Py_XDECREF(outb);
    if (rc < 0) {
        PyErr_Format(PyExc_ValueError, "%s", res.error);
        return NULL;
    }
    PyObject *d = Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:O,s:i,s:l,s:s,s:d,s:O,s:k,s:I,s:O}", "events",
                                (unsigned long long)res.events, "live_events", (unsigned long long)res.live_events,
                                "bytes", (unsigned long long)res.bytes, "dropped", (unsigned long long)res.dropped,
                                "pauses", (unsigned long long)res.pauses, "complete",
                                res.complete ? Py_True : Py_False, "write_errno", res.write_errno, "pid", rmeta.pid,
                                "clock", rmeta.clock, "ns_per_tick", rmeta.ns_per_tick, "precise",
                                rmeta.precise ? Py_True : Py_False, "python_hex", (unsigned long)rmeta.python_hex,
                                "partial", oc_render_partial(), "near_zero", rmeta.near_zero ? Py_True : Py_False);
    if (!d)
        return NULL;
    /* the recorded process name (a recording of another tool's may hold any bytes: invalid UTF-8 replaced) */
    PyObject *name = rmeta.process_name_raw
                         ? PyUnicode_DecodeUTF8(rmeta.process_name_raw, (Py_ssize_t)strlen(rmeta.process_name_raw), "replace")
                         : Py_NewRef(Py_None);
    if (!name || PyDict_SetItemString(d, "process_name", name) < 0) {
        Py_XDECREF(name);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(name);
    /* a damaged recording: what the render repaired (None: nothing) */
    char damage[512];
    PyObject *dmg = oc_render_damage(damage, sizeof damage) ? PyUnicode_FromString(damage) : Py_NewRef(Py_None);
    if (!dmg || PyDict_SetItemString(d, "damaged", dmg) < 0) {
        Py_XDECREF(dmg);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(dmg);
    return d;
}

static PyObject *py_report_data(PyObject *mod, PyObject *args) {
    (void)mod;
    int with_code = 0;
    unsigned int limit = 0;
    if (!PyArg_ParseTuple(args, "|pI:_report_data", &with_code, &limit))
        return NULL;
    if (oc_render_live_running()) { /* (its statistics are being built: the session's, at stop) */
        PyErr_SetString(PyExc_RuntimeError, "ocular: report data is available after stop_tracing()");
        return NULL;
    }
    return oc_stats_export(with_code, limit);
}

static PyObject *py_dump(PyObject *mod, PyObject *arg) {
    (void)mod;
    PyObject *pathb;
    if (!PyUnicode_FSConverter(arg, &pathb))
        return NULL;
    if (!sess.active || !sess.ring_bytes) {
        Py_DECREF(pathb);
        PyErr_SetString(PyExc_RuntimeError, "ocular: no flight-recorder (ring) session is running");
        return NULL;
    }
    int err = oc_recorder_dump(PyBytes_AS_STRING(pathb));
    if (err) {
        errno = err;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, arg);
        Py_DECREF(pathb);
        return NULL;
    }
    Py_DECREF(pathb);
    Py_RETURN_NONE;
}

/* Append to `out` the live code objects of this session's table whose extra `pick` selects; returns
 * out, or NULL (out released) on failure. */
static PyObject *append_codes(PyObject *out, int (*pick)(const oc_codeextra *)) {
    for (uint32_t id = 0; id < sess.ncodes; id++) {
        oc_codeent *e = oc_code_entry(id);
        if (!e->extra || !pick(e->extra))
            continue;
        PyObject *co = oc_code_object(e);
        if (co && PyList_Append(out, co) < 0) {
            Py_DECREF(co);
            Py_DECREF(out);
            return NULL;
        }
        Py_XDECREF(co);
    }
    return out;
}

/* (code id, code object) of every code object of the last session's table still alive: at stop, the
 * Python layer writes the specialized bytecode of those with loops into a kept recording. */
static PyObject *py_live_codes(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    PyObject *out = PyList_New(0);
    for (uint32_t id = 0; out && id < sess.ncodes; id++) {
        PyObject *co = oc_code_object(oc_code_entry(id));
        if (!co)
            continue;
        PyObject *item = Py_BuildValue("(IN)", id, co);
        if (!item || PyList_Append(out, item) < 0)
            Py_CLEAR(out);
        Py_XDECREF(item);
    }
    return out;
}

static int disabled_here(const oc_codeextra *ex) { return (ex->flags & ~CF_ASYNCIO) || ex->sites_disabled; }
static int probed_here(const oc_codeextra *ex) { return ex->probe == 1 || ex->calls == 1; }

/* Code objects with sites we disabled: the Python layer re-instruments them at stop so that a later
 * session (or another tool) starts from armed sites. */
static PyObject *py_disabled_codes(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    for (size_t i = 0; i <= sess.codes.mask; i++) { /* the excluded ones: in the code map only */
        const oc_cmslot *s = &sess.codes.slots[i];
        const oc_codeextra *ex = s->val;
        if (s->key && ex && ex->gen == sess.gen && (ex->flags & CF_EXCLUDED) && PyList_Append(out, s->key) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return append_codes(out, disabled_here);
}

PyDoc_STRVAR(probes_doc, "_probes(tool_id, set_local_events, INSTRUCTION)\n\n"
                         "Adaptive mode: arm an instruction probe on each loop whose back edge passes the\n"
                         "threshold (threshold 0: after a warm-up); after _start, _stop ends it.");

static PyObject *py_probes(PyObject *mod, PyObject *args) {
    (void)mod;
    int tool_id;
    PyObject *fn;
    unsigned long ev;
    if (!PyArg_ParseTuple(args, "iOk:_probes", &tool_id, &fn, &ev))
        return NULL;
    if (!sess.active || sess.precise) {
        PyErr_SetString(PyExc_RuntimeError, "ocular: probes need an adaptive session");
        return NULL;
    }
    sess.tool_id = tool_id;
    sess.insn_event = ev;
    Py_XSETREF(sess.set_local_events, Py_NewRef(fn));
    /* a probe lasts OC_PROBE_LEN executions of its hottest instruction, or the threshold's if lower */
    sess.insn_limit = sess.threshold && sess.threshold < OC_PROBE_LEN ? sess.threshold : OC_PROBE_LEN;
    sess.probe_after = sess.threshold ? 0 : OC_PROBE_AFTER;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(calls_doc, "_calls(tool_id, set_local_events, CALL)\n\n"
                        "C functions: arm CALL on each code object of the session as it registers (a local\n"
                        "event: codeinfo.c); after _start, before the callbacks are registered.");

static PyObject *py_calls(PyObject *mod, PyObject *args) {
    (void)mod;
    int tool_id;
    PyObject *fn;
    unsigned long ev;
    if (!PyArg_ParseTuple(args, "iOk:_calls", &tool_id, &fn, &ev))
        return NULL;
    if (!sess.active || !sess.c_functions) {
        PyErr_SetString(PyExc_RuntimeError, "ocular: _calls needs a session recording C functions");
        return NULL;
    }
    sess.tool_id = tool_id;
    sess.call_event = ev;
    Py_XSETREF(sess.arm_calls, Py_NewRef(fn));
    Py_RETURN_NONE;
}

/* _arm_code(code): register a code object that is already running (a frame on some thread's stack when
 * tracing starts), which arms its calls: it would register only at its next event. */
static PyObject *py_arm_code(PyObject *mod, PyObject *code) {
    (void)mod;
    if (!PyCode_Check(code)) {
        PyErr_SetString(PyExc_TypeError, "_arm_code() needs a code object");
        return NULL;
    }
    if (sess.active && sess.arm_calls && !oc_code_register((PyCodeObject *)code))
        PyErr_Clear();
    Py_RETURN_NONE;
}

/* Code objects we set local events on this session: instruction probes, C functions' CALL (3.12/3.13
 * clear them at stop: free_tool_id leaves local events in place). */
static PyObject *py_probed_codes(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    PyObject *out = PyList_New(0);
    return out ? append_codes(out, probed_here) : NULL;
}

static PyObject *py_code_lines(PyObject *mod, PyObject *code) {
    (void)mod;
    if (!PyCode_Check(code)) {
        PyErr_SetString(PyExc_TypeError, "_code_lines() needs a code object");
        return NULL;
    }
    PyObject *bc = PyCode_GetCode((PyCodeObject *)code);
    if (!bc)
        return NULL;
    uint32_t n = (uint32_t)(PyBytes_GET_SIZE(bc) / 2);
    Py_DECREF(bc);
    int from_table = 0;
    int32_t *lines = oc_line_table((PyCodeObject *)code, n, &from_table);
    if (!lines)
        return PyErr_NoMemory();
    PyObject *list = PyList_New(n);
    for (uint32_t i = 0; list && i < n; i++) {
        PyObject *v = lines[i] < 0 ? Py_NewRef(Py_None) : PyLong_FromLong(lines[i]);
        if (!v) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, v);
    }
    free(lines);
    return list ? Py_BuildValue("(NO)", list, from_table ? Py_True : Py_False) : NULL;
}

static PyObject *py_release(PyObject *mod, PyObject *args) {
    (void)mod;
    int keep_codes = 0;
    if (!PyArg_ParseTuple(args, "|p:_release", &keep_codes))
        return NULL;
    if (!sess.active && !keep_codes) {
        oc_codetable_clear();
    }
    oc_render_release();
    oc_tree_release();
    Py_RETURN_NONE;
}

static PyObject *py_calltree(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    return oc_tree_export();
}

static PyObject *py_mute_thread(PyObject *mod, PyObject *arg) {
    (void)mod;
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    return PyBool_FromLong(oc_buffer_mute(on));
}

static PyObject *py_is_active(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    return PyBool_FromLong(sess.active);
}

static void init_sync(void) {
    pthread_mutex_init(&sess.lock, NULL);
    pthread_cond_init(&sess.cond_writer, NULL);
    pthread_cond_init(&sess.cond_free, NULL);
}

/* fork(): hold the chunk lock across the fork so the child never inherits it mid-update.  These run
 * inside fork() itself, after CPython's own before-fork work (import lock and all), with the forking
 * thread holding the GIL: no callback can be waiting for the lock, only the writer, briefly. */
static int fork_locked;
static void atfork_prepare(void) {
    fork_locked = sess.active || sess.writer_started; /* another thread's stop may still be joining the writer */
    if (fork_locked)
        pthread_mutex_lock(&sess.lock);
}
static void atfork_parent(void) {
    if (fork_locked)
        pthread_mutex_unlock(&sess.lock);
}
static void atfork_child(void) {
    oc_render_live_fork_child(); /* a render may still follow a recording that just stopped */
    if (fork_locked) {
        init_sync(); /* the writer thread does not exist here; the lock must start free */
        oc_recorder_fork_child(); /* at once: a callback before _after_fork_child must not wait for it */
    }
}

PyDoc_STRVAR(after_fork_child_doc,
             "_after_fork_child(output, tmp_output, recording, main_ident) -> bool\n\n"
             "In a fork child: drop the parent's pending events and trace into a new file.  Returns\n"
             "False if no session was active; raises if the child's file cannot be created (tracing\n"
             "is then off in the child).  recording None: drop them and stay off in the child (one that\n"
             "will exec from C, where nothing could save its trace); returns False.");

static PyObject *py_after_fork_child(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *out, *tmp, *rec;
    unsigned long ident;
    if (!PyArg_ParseTuple(args, "OOOk", &out, &tmp, &rec, &ident))
        return NULL;
    if (rec != Py_None && !PyUnicode_Check(rec)) {
        PyErr_SetString(PyExc_TypeError, "recording must be a str or None");
        return NULL;
    }
    if (!sess.active)
        Py_RETURN_FALSE;
    oc_buffer_fork_child();
    oc_signals_fork_child();
    oc_sampling_fork_child();
    oc_recorder_fork_child();
    if (rec == Py_None) {
        sess.active = 0;
        Py_RETURN_FALSE;
    }
    /* the parent's code table: its entries' names were freed once the parent recorded them; every code
     * object registers again here (a new generation), into this child's own recording */
    oc_codetable_clear();
    sess.gen++;
    sess.pid = (long)getpid();
    sess.main_ident = ident;
    reset_counters();
    oc_clock_sample(&sess.tsc0, &sess.mono0_ns);
    sess.active = 0;
    if (set_paths(out, tmp, rec) < 0)
        return NULL;
    sess.write_json = out != Py_None && sess.format != OC_FORMAT_STATS;
    hooks_set();
    if (oc_recorder_start() < 0)
        return NULL;
    sess.active = 1;
    Py_RETURN_TRUE;
}

static PyObject *py_set_test_clock(PyObject *mod, PyObject *arg) {
    (void)mod;
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    if (sess.active) {
        PyErr_SetString(PyExc_RuntimeError, "the test clock cannot change while tracing");
        return NULL;
    }
    oc_clock_set_test(on);
    Py_RETURN_NONE;
}

/* tests only (tests/test_deflate.py), between renders: the Perfetto sink's encoder (one state per process) */
static PyObject *py_deflate(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer in;
    int fresh = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &in, &fresh))
        return NULL;
    if (sess.active) {
        PyBuffer_Release(&in);
        PyErr_SetString(PyExc_RuntimeError, "_deflate is for tests, not while tracing");
        return NULL;
    }
    if (fresh)
        oc_z_start();
    uint8_t *out = NULL;
    size_t cap = 0, n = oc_deflate(in.buf, (size_t)in.len, &out, &cap);
    PyBuffer_Release(&in);
    PyObject *r = n ? PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)n) : PyErr_NoMemory();
    free(out);
    return r;
}

static PyObject *py_only_helpers_left(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = oc_only_helper_threads_left();
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(r);
}

static PyObject *py_live_progress(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    return PyLong_FromLong(oc_render_live_progress());
}

static PyObject *py_clock_info(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    int tsc = oc_clock_init();
    return Py_BuildValue("{s:s,s:O}", "source", oc_clock_source(), "invariant_tsc", tsc ? Py_True : Py_False);
}

/* Remove the file `path`, leaving the cost of freeing a large file's pages and blocks (the kernel does it
 * when the last reference goes: ~3 ms for a 30 MB recording, ~6 ms for a 94 MB trace, measured at stop)
 * to a short-lived thread, so that this one goes on at once (to the report, the interpreter's exit):
 * the name goes now, the file lives on unnamed, held by a descriptor (O_PATH), until that thread closes
 * it.  If the process ends first, the kernel closes it then; nothing is left either way.  (A child
 * forked in the microseconds before that close inherits the descriptor and keeps the blocks until it
 * exits.)  Returns 0 or the errno of unlink(2).  GIL released by the caller. */
static void *closer_main(void *arg) {
    close((int)(intptr_t)arg);
    return NULL;
}

static int remove_later(const char *path) {
#ifdef O_PATH
    int fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
#else
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
#endif
    if (unlink(path) != 0) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return err;
    }
    if (fd >= 0) {
        pthread_attr_t a;
        pthread_t th;
        int started = 0;
        if (pthread_attr_init(&a) == 0) {
            pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
            started = oc_thread_create(&th, &a, closer_main, (void *)(intptr_t)fd, OC_REMOVE_THREAD_NAME) == 0;
            pthread_attr_destroy(&a);
        }
        if (!started)
            close(fd);
    }
    return 0;
}

static PyObject *py_remove(PyObject *mod, PyObject *arg) {
    (void)mod;
    PyObject *o = NULL;
    if (!PyUnicode_FSConverter(arg, &o))
        return NULL;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = remove_later(PyBytes_AS_STRING(o));
    Py_END_ALLOW_THREADS
    Py_DECREF(o);
    if (err) {
        errno = err;
        return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, arg);
    }
    Py_RETURN_NONE;
}

/* Put the finished file `src` under the name `dst`, replacing what is there, as rename(2) does, but
 * without rename's cost of replacing a large file: on ext4 a rename over an existing file starts the
 * writeback of the new one at once (its auto_da_alloc heuristic; ~58 ms for a 97 MB trace, measured),
 * an exchange does not.  So when `dst` exists the two names are exchanged (renameat2 RENAME_EXCHANGE:
 * at every moment `dst` holds the old or the new file), then the old file, now under `src`, is
 * removed, its blocks freed by another thread (remove_later; returns False if it could not be: it is
 * left under `src`).  Where the system or the
 * filesystem has no exchange, a plain rename.  OSError if neither works. */
static PyObject *py_replace(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *src_arg, *dst_arg, *src_o = NULL, *dst_o = NULL;
    if (!PyArg_ParseTuple(args, "OO:_replace", &src_arg, &dst_arg))
        return NULL;
    if (!PyUnicode_FSConverter(src_arg, &src_o) || !PyUnicode_FSConverter(dst_arg, &dst_o)) {
        Py_XDECREF(src_o);
        return NULL;
    }
    const char *src = PyBytes_AS_STRING(src_o), *dst = PyBytes_AS_STRING(dst_o);
    int rc, err = 0, exchanged = 0;
    Py_BEGIN_ALLOW_THREADS
#if defined(SYS_renameat2)
    struct stat st; /* (only a regular file is exchanged: an exchange would also swap a directory in) */
    rc = lstat(dst, &st) == 0 && S_ISREG(st.st_mode)
             ? (int)syscall(SYS_renameat2, AT_FDCWD, src, AT_FDCWD, dst, 2 /* RENAME_EXCHANGE */)
             : -1;
    if (rc == 0) {
        exchanged = 1;
        err = remove_later(src);
    } else
#endif
    {
        rc = rename(src, dst);
        if (rc != 0)
            err = errno;
    }
    Py_END_ALLOW_THREADS
    PyObject *res = NULL;
    if (!exchanged && rc != 0) {
        errno = err;
        PyErr_SetFromErrnoWithFilenameObjects(PyExc_OSError, src_arg, dst_arg);
    } else {
        res = Py_NewRef(err ? Py_False : Py_True); /* False: the old file is left under `src` */
    }
    Py_DECREF(src_o);
    Py_DECREF(dst_o);
    return res;
}

PyDoc_STRVAR(signals_arm_doc,
             "_signals_arm(signals, render, convert_args, verbose) -> int\n\n"
             "Save the session on each of `signals` (a tuple of SIGTERM, SIGHUP) whose disposition is the\n"
             "default (sigsave.c): the recorder ends the recording, renders it with `render` (0 JSON,\n"
             "1 Perfetto, 4 speedscope; -1 keeps it for convert, -2 makes it the output), then the process\n"
             "dies of the signal.  convert_args: the `convert` options named on stderr for a kept recording\n"
             "(None: -o OUTPUT).  verbose: say where the trace was written.  Returns a bit per signal armed\n"
             "(1 SIGTERM, 2 SIGHUP).  Internal: use start_tracing(save_on_signals=...).");

static PyObject *py_signals_arm(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *sigs, *cargs;
    int render, verbose;
    if (!PyArg_ParseTuple(args, "O!iOp:_signals_arm", &PyTuple_Type, &sigs, &render, &cargs, &verbose))
        return NULL;
    if (!sess.active) {
        PyErr_SetString(PyExc_RuntimeError, "ocular: tracing is not running");
        return NULL;
    }
    if (render != OC_SIG_KEEP && render != OC_SIG_INSTALL && !(oc_format_caps(render) & OC_CAP_FILE)) {
        PyErr_Format(PyExc_ValueError, "unknown render %d", render);
        return NULL;
    }
    int v[8], n = (int)PyTuple_GET_SIZE(sigs);
    if (n > 8) {
        PyErr_SetString(PyExc_ValueError, "too many signals");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        long l = PyLong_AsLong(PyTuple_GET_ITEM(sigs, i));
        if (l == -1 && PyErr_Occurred())
            return NULL;
        v[i] = l > 0 && l < 1024 ? (int)l : 0;
    }
    char *ca = NULL;
    if (cargs != Py_None && !(ca = dup_utf8(cargs)))
        return NULL;
    int bits = oc_signals_arm(v, n, render, ca, verbose);
    free(ca);
    return bits < 0 ? NULL : PyLong_FromLong(bits);
}

static PyObject *py_signals_armed(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    return PyLong_FromLong(oc_signals_armed());
}

static PyObject *py_signals_disarm(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    oc_signals_disarm();
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"_signals_arm", py_signals_arm, METH_VARARGS, signals_arm_doc},
    {"_signals_disarm", py_signals_disarm, METH_NOARGS,
     "_signals_disarm(): after a stop, the default disposition again for the signals armed (where the\n"
     "handler is still ours); a signal that arrived during the stop ends the process now."},
    {"_signals_armed", py_signals_armed, METH_NOARGS,
     "_signals_armed() -> int: a bit per signal whose handler is armed (1 SIGTERM, 2 SIGHUP)."},
    {"_start", (PyCFunction)(void (*)(void))py_start, METH_VARARGS | METH_KEYWORDS, start_doc},
    {"_stop", py_stop, METH_NOARGS, stop_doc},
    {"_remove", py_remove, METH_O,
     "_remove(path): os.unlink(path), the file's blocks freed by a short-lived thread (OSError as unlink)."},
    {"_render", py_render, METH_VARARGS, render_doc},
    {"_calltree", py_calltree, METH_NOARGS,
     "_calltree() -> dict: the call tree of the last render in format 3: nodes [(parent, code, calls,\n"
     "total_ns, self_ns)] (parent and code -1 for a thread's root), threads [(tid, name, root, first_ns,\n"
     "last_ns)], codes [(qualname, filename, firstlineno) or None, by code id]."},
    {"_report_data", py_report_data, METH_VARARGS,
     "_report_data(with_code_objects=False, limit=0): statistics of the last render (at most limit\n"
     "functions by self time and limit by loop cycles; 0: all), with the recording's python_hex and\n"
     "cache_entries (256 bytes, its header's: the recorded bytecode's inline cache units per opcode)."},
    {"_dump", py_dump, METH_O, "Ring mode: write the kept window as a recording at the given path."},
    {"_disabled_codes", py_disabled_codes, METH_NOARGS, "Code objects with sites disabled this session."},
    {"_probes", py_probes, METH_VARARGS, probes_doc},
    {"_probed_codes", py_probed_codes, METH_NOARGS, "Code objects with local events of ours this session."},
    {"_calls", py_calls, METH_VARARGS, calls_doc},
    {"_arm_code", py_arm_code, METH_O, "Register a running code object (arms its C calls)."},
    {"_replace", py_replace, METH_VARARGS,
     "_replace(src, dst): rename src over dst (exchanged, then the old file removed, where possible)."},
    {"_live_codes", py_live_codes, METH_NOARGS,
     "[(code id, code object)] of the last session's code table, for those still alive."},
    {"_code_lines", py_code_lines, METH_O,
     "_code_lines(code) -> (line of each code unit or None, read from co_linetable (else co_lines())): as\n"
     "the recording's CODE block has them (tests compare them with co_lines())."},
    {"_release", py_release, METH_VARARGS,
     "_release(keep_codes=False): free the last render's tables, and the code table of the last session\n"
     "unless keep_codes (a render of its recording still to come reads its code objects)."},
    {"_is_active", py_is_active, METH_NOARGS, "True while a session is running."},
    {"_mute_thread", py_mute_thread, METH_O, "_mute_thread(on): this thread records nothing while on; returns whether it was muted."},
    {"_after_fork_child", py_after_fork_child, METH_VARARGS, after_fork_child_doc},
    {"_set_test_clock", py_set_test_clock, METH_O, "Replace the TSC with a counter (tests only)."},
    {"_deflate", py_deflate, METH_VARARGS,
     "_deflate(data, fresh=False) -> bytes: data as one zlib stream by the Perfetto sink's encoder, coded\n"
     "with the previous call's symbol counts as consecutive batches are (fresh: forget them). Tests only."},
    {"_only_helpers_left", py_only_helpers_left, METH_NOARGS,
     "_only_helpers_left() -> bool: whether every live thread is one of Ocular's helpers, as a fork child's\n"
     "recorder asks before it ends an orphaned process (False when unsure). Tests only."},
    {"_live_progress", py_live_progress, METH_NOARGS,
     "_live_progress() -> int: chunks (and thread ends) the render while recording has rendered so far; -1\n"
     "when none runs or it gave up (the render at stop starts over). Tests wait on it instead of sleeping."},
    {"clock_info", py_clock_info, METH_NOARGS, "Which time source Ocular uses on this machine."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, .m_name = "ocular._ocular",
    .m_doc = "Ocular's C engine: sys.monitoring callbacks, per-thread buffers, the recorder thread and the renderer.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__ocular(void) {
    static int initialised = 0;
    PyObject *m = PyModule_Create(&moddef);
    if (!m)
        return NULL;
    if (!initialised) {
        init_sync();
        if (pthread_atfork(atfork_prepare, atfork_parent, atfork_child) != 0) {
            PyErr_SetString(PyExc_RuntimeError, "ocular: pthread_atfork failed");
            goto fail;
        }
        if (oc_codeinfo_init() < 0 || oc_buffer_init() < 0)
            goto fail;
        initialised = 1;
    }
    if (oc_monitor_init(m) < 0)
        goto fail;
    if (oc_sampling_init(m) < 0 || oc_owncost_init(m) < 0)
        goto fail;
    if (oc_usdt_init(m) < 0) /* usdt.c */
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
