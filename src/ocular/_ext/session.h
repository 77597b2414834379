/* session.h -- the tracing session (session.c holds `sess`): its options, code table, threads, clock
 * calibration, output, the recorder's queue, the results, and the hooks the binding sets.
 * Included through ocular.h (the record side's base: Python.h, render.h, hidden visibility). */
#ifndef OCULAR_SESSION_H
#define OCULAR_SESSION_H
#ifndef OCULAR_H
#error "session.h is included through ocular.h"
#endif

typedef struct oc_chunk oc_chunk; /* buffer.h: a chunk of records, queued for the recorder */

#define OC_PAGE_BITS 10
#define OC_PAGE_SIZE (1u << OC_PAGE_BITS)
#define OC_MAX_PAGES 4096

typedef struct {
    int active;
    uint32_t gen;
    int precise;
    uint32_t threshold;    /* hits of a jump, instruction or C call site before it answers DISABLE (0: never) */
    uint32_t stall_ms;     /* an asyncio task step this long is a loop stall (the OPTIONS block; 0: default) */
    uint32_t fn_threshold; /* enters of a function before its start answers DISABLE: the threshold in
                              near-zero mode, else 0 (function events are never disabled) */
    uint64_t ccall_keep_ticks; /* a C call site whose timed calls average this long stays instrumented */
    _Atomic uint64_t ccall_cap_ticks; /* a timed C call counts at most this long (OC_CCALL_CAP; until the early
                                         calibration, UINT64_MAX) */
    int calibrating;       /* owncost.c runs its functions: the filters let them in */
    uint64_t own_cost[16]; /* owncost.c: ticks one event costs, by the kind of the record after it */
    atomic_int own_cost_set; /* own_cost is measured (the recorder writes it once: OC_BLK_OWNCOST) */
    int write_json;        /* a trace file is written (either format) */
    int format;            /* OC_FORMAT_JSON or OC_FORMAT_PERFETTO */
    PyObject *disable;     /* sys.monitoring.DISABLE */
    oc_codemap codes;      /* code object -> its oc_codeextra (codemap.c); excluded ones included */

    /* filters: NULL-terminated arrays of UTF-8 strings */
    char **include_only;
    char **exclude;
    char *own_dir;         /* Ocular's own package directory, always excluded */
    uint8_t cache_entries[256];

    /* code table */
    oc_codeent *pages[OC_MAX_PAGES];
    uint32_t ncodes;

    /* threads */
    oc_thread *threads;    /* grown under the registry lock; writer reads it only after the final flush */
    uint32_t nthreads, cap_threads;
    unsigned long main_ident;

    /* clock */
    uint64_t tsc0, mono0_ns;
    double ns_per_tick;    /* the rate from knee_tsc on: set by the final calibration (~20 ms in) */
    int calibrated;        /* the final calibration is done */
    double early_npt;      /* the rate before knee_tsc: set by the early calibration (~2 ms in) */
    uint64_t knee_tsc;     /* where early_npt gives way to ns_per_tick (UINT64_MAX: one rate throughout) */
    int early_calibrated;  /* the early calibration is done: timestamps before knee_tsc are final */

    /* output */
    char *out_path, *tmp_path;
    char *process_name;    /* JSON-escaped */
    char *process_name_raw;
    long pid;

    /* writer and chunk traffic: guarded by lock */
    pthread_mutex_t lock;
    pthread_cond_t cond_writer;   /* writer waits for work */
    pthread_cond_t cond_free;     /* producers wait for the queue to shrink */
    oc_chunk *q_head, *q_tail;
    oc_chunk *free_list;
    uint32_t nchunks;             /* allocated: live threads' chunks + queued + free */
    uint32_t nqueued;
    uint32_t max_queued;          /* OC_MAX_QUEUED (OCULAR_TEST_RECORDER_QUEUE in tests) */
    int recorder_idle;            /* the recorder waits for work (lock held to read or write) */
    uint32_t nfree;
    uint32_t ncodes_pub;          /* code table entries published to the recorder (set under lock
                                     by a thread holding the GIL) */
    uint64_t pauses;              /* times a thread waited for the recorder */
    uint32_t threads_named;       /* bumped (under lock) whenever a thread gets its name */
    uint32_t threads_named_seen;  /* the recorder's copy */
    char *rec_path;               /* the recording being written (output.pid.rec, or the .ocular tmp) */
    size_t ring_bytes;            /* flight recorder: keep only this much of the newest chunks (0: all) */
    int loops;                    /* OC_LOOPS_*: what an orphaned fork child's render shows of loops */
    int c_functions;              /* CALL/C_RETURN/C_RAISE are monitored */
    PyObject *set_local_events;   /* adaptive mode with a threshold: sys.monitoring.set_local_events, for
                                     instruction probes (NULL: none) */
    int tool_id;
    unsigned long insn_event;     /* sys.monitoring.events.INSTRUCTION */
    PyObject *arm_calls;          /* C functions: sys.monitoring.set_local_events, for CALL on each code
                                     object as it registers (NULL: C functions are not recorded) */
    unsigned long call_event;     /* sys.monitoring.events.CALL */
    uint32_t probe_after;         /* threshold 0 with probes: back jumps of a code before its probe (0: off) */
    uint32_t insn_limit;          /* executions of an instruction site recorded (0: all): the threshold, or
                                     OC_PROBE_LEN for threshold-0 probes */
    int stopping;
    pthread_t writer;
    int writer_started;

    /* results */
    atomic_uint_fast64_t nevents;
    uint64_t dropped;
    int internal_error;           /* set by the hot path on failures it cannot report */
    char internal_msg[256];
    int write_errno;              /* set by the writer */
    uint64_t bytes_written;
    /* What the record side asks of the renderer and of the binding, set by the binding (module.c, oc_hooks_set)
     * before the recorder starts: the recorder and the signal save call these, never the renderer itself. */
    struct {
        void (*recording_failed)(int err); /* from the recorder thread, once a session: a write failed (errno
                                            * err); the main thread says so at its next bytecode (a pending
                                            * call to ocular._recording_failed) */
        int (*render)(const char *rec_path, int format, const char *out_path, int progress, int loops, int stats,
                      oc_render_result *res); /* the recording into an output (oc_render_file) */
        void (*live_start)(const char *rec_path, int format, const char *out_path, int loops); /* if one can */
    } hooks;
} oc_session;

extern oc_session sess;

#endif
