/* asyncio.h -- asyncio's task steps on the record side (asyncio.c): which task a coroutine's enter begins a
 * step of, who woke it, and its cancellation.
 * Included through ocular.h (the record side's base: Python.h, render.h, hidden visibility), after
 * buffer.h, codeinfo.h. */
#ifndef OCULAR_ASYNCIO_H
#define OCULAR_ASYNCIO_H
#ifndef OCULAR_H
#error "asyncio.h is included through ocular.h"
#endif

/* asyncio.c: a coroutine's enter at `depth` (GIL held, before its record): 1 if it begins a task step
 * (an OC_MARK_TASK record was written); its leave at `depth` ends the step it began */
int oc_task_enter(oc_tbuf *b, uint32_t depth, oc_codeextra *coro);
static inline void oc_task_leave(oc_tbuf *b, uint32_t depth) {
    if (b && b->step_depth == depth)
        b->step_depth = 0;
}
void oc_tasks_reset(void);                /* GIL held: at stop */
/* asyncio's call_soon was entered (its enter recorded): an OC_MARK_WAKE record if its callback runs a
 * step of a task */
void oc_task_wake(void);
/* a coroutine's unwind at `depth` by `exc`: an OC_MARK_CANCELLED record first if it is the step's coroutine
 * and `exc` an asyncio.CancelledError */
void oc_task_unwind(oc_tbuf *b, uint32_t depth, PyObject *exc);

#endif
