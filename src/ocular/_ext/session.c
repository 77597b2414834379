/* session.c -- the tracing session's state (sess, session.h: its options, threads, counters and the hooks into
 * the renderer), shared by the record side's files.  It uses no other file of ours: every record-side file may
 * depend on it, and it on none of them. */
#include "ocular.h"

oc_session sess;
