package org.etlstage.worker;

/** Hooks every worker has; all optional. */
public interface Worker {
    /** Once, before the first request (open connections, files). */
    default void setup(Scenario scenario) throws Exception {}

    /** Once, when stdin closes (the supervisor has no more work) or the worker fails. */
    default void teardown() throws Exception {}

    /** Counters for the end-of-run summary, asked after each batch or cycle, before its EOP; null: none. */
    default Report report() {
        return null;
    }
}
