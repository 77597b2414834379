/* recorder.h -- the recorder thread (recorder.c): it moves full chunks into the recording.
 * Included through ocular.h (the record side's base: Python.h, render.h, hidden visibility), after
 * buffer.h. */
#ifndef OCULAR_RECORDER_H
#define OCULAR_RECORDER_H
#ifndef OCULAR_H
#error "recorder.h is included through ocular.h"
#endif

int oc_recorder_start(void);             /* opens the recording and starts the thread; -1 with exception */
void oc_recorder_stop(uint64_t stop_ticks); /* joins it and finishes the recording; GIL released */
void oc_recorder_fork_child(void);       /* forget the parent's recorder state */
uint64_t oc_recorder_events(void);
uint64_t oc_recorder_bytes(void);
int oc_recorder_errno(void);
int oc_recorder_dump(const char *path);  /* ring mode: write the kept window as a recording; errno */
int oc_only_helper_threads_left(void); /* recorder.c: no thread but those two is alive (fork children) */

#endif
