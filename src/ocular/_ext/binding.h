/* binding.h -- what the binding's units give module.c: the callbacks (monitor.c), the own-cost measure
 * (owncost.c), the render's results as Python objects (results.c) and the USDT poller (usdt.c); each
 * adds its Python functions to the module.
 * Included through ocular.h (the record side's base: Python.h, render.h, hidden visibility). */
#ifndef OCULAR_BINDING_H
#define OCULAR_BINDING_H
#ifndef OCULAR_H
#error "binding.h is included through ocular.h"
#endif

/* monitor.c */
int oc_monitor_init(PyObject *module);
PyObject *oc_make_callbacks(int c_functions);

/* owncost.c: what one event costs, measured at start */
int oc_owncost_init(PyObject *module);   /* adds _owncost_baseline, _owncost_measure */

/* results.c (the binding, GIL held): the render's results as Python objects for the report */
PyObject *oc_tree_export(void);                      /* the last tree render's call tree */
PyObject *oc_stats_export(int with_code_objects, uint32_t limit); /* the statistics (_report_data) */
int oc_attr_export(PyObject *func, uint32_t id);     /* adds the estimate fields to a report row */
PyObject *oc_attr_summary(void);                     /* the sampling figures of the session */

/* usdt.c: USDT probes (provider "ocular") with their own sys.monitoring tool; adds _usdt_* functions */
int oc_usdt_init(PyObject *module);

#endif
