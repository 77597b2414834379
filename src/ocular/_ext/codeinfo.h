/* codeinfo.h -- each code object's data (codeinfo.c): the extra kept beside it (codemap.c), its entry in the
 * session's code table, and the code table entries of C functions.
 * Included through ocular.h (the record side's base: Python.h, render.h, hidden visibility), after
 * session.h. */
#ifndef OCULAR_CODEINFO_H
#define OCULAR_CODEINFO_H
#ifndef OCULAR_H
#error "codeinfo.h is included through ocular.h"
#endif

typedef struct oc_codeextra {
    uint32_t gen;
    uint32_t id;
    uint32_t flags;
    uint32_t enters;
    uint32_t nunits;
    uint32_t sites_disabled; /* a jump or instruction site of this code answered DISABLE */
    uint32_t late_ends;      /* unrecorded ends seen while return sites were kept armed (capped) */
    uint32_t probe;          /* adaptive: 1 once an instruction probe was armed on this code (2: it failed) */
    uint32_t insn_done;      /* an instruction site passed the threshold: no more INSTRUCTION records */
    uint32_t back_jumps;     /* threshold 0 with probes: backward jumps seen, up to sess.probe_after */
    PyObject *code;          /* the code object this is the extra of (borrowed: it frees this) */
    uint32_t open;           /* threshold > 0: recorded activations not yet ended, on every thread */
    uint32_t calls;          /* C functions: 1 once CALL was armed on this code (a local event), 2 if it is
                                left unarmed (it names sys.setprofile: codeinfo.c arm_calls) */
    uint32_t *edge_hits;   /* per unit: JUMP/BRANCH hits at this source; lazily allocated */
    uint32_t *insn_hits;   /* per unit: INSTRUCTION hits; lazily allocated */
    uint32_t *call_hits;   /* per unit: CALL hits of C functions at this call site; lazily allocated */
    uint64_t *call_ticks;  /* per unit, 3 each: ticks of this site's timed C calls and how many, since its
                              last verdict, and the C function it calls (its id + 1; UINT64_MAX: several)
                              (allocated with call_hits) */
} oc_codeextra;


int oc_codeinfo_init(void);
PyObject *oc_code_object(oc_codeent *e); /* new reference to the live code object, or NULL (no error) */
void oc_codetable_snapshot(void);        /* GIL held: every entry's flags/enters from its extra */
oc_codeextra *oc_code_register(PyCodeObject *co);   /* slow path; NULL on failure */
unsigned long oc_local_events(const oc_codeextra *ex); /* the local events Ocular set on its code object */
int32_t *oc_line_table(PyCodeObject *co, uint32_t nunits, int *from_table); /* malloc'd; NULL: no memory */
void oc_codetable_clear(void);
static inline oc_codeent *oc_code_entry(uint32_t id) {
    return &sess.pages[id >> OC_PAGE_BITS][id & (OC_PAGE_SIZE - 1)];
}
char *oc_dup_raw(const char *s, Py_ssize_t n);     /* NUL-terminated copy of n bytes */
void oc_internal_error(const char *msg);           /* first failure wins; reported at stop */
uint32_t *oc_code_counters(oc_codeextra *ex, int which); /* 0 edges, 1 instructions, 2 calls; lazily
                                                            allocated; NULL on failure */
/* C functions (builtins, extension functions) get code table entries of their own, one per PyMethodDef,
 * named as cProfile names them, file "~", line 0 */
/* a code table entry that is not a code object (qualname, filename: C strings); its id, or UINT32_MAX */
uint32_t oc_code_add_named(const char *qualname, const char *filename);
uint32_t oc_cfunc_id(PyObject *callable);   /* UINT32_MAX: not a C function we record (or no memory) */
void oc_cfunc_mark_cut(PyObject *callable); /* a call site of it was de-instrumented: its calls are partial */
void oc_cfunc_reset(void);

#endif
