package org.etlstage.worker;

/** An E-worker: plain (one call for the whole run) or cyclic (one call per request). */
public interface Extractor extends Worker {
    /** Emit the messages of one cycle (in plain mode, of the whole run; {@code request} is then null). */
    void extract(Request request, Output out) throws Exception;

    /**
     * Worker-managed offsets: a new request arrived, so the previous cycle's window was
     * fully loaded downstream — commit its offsets now.  Never commit on end of input:
     * that may mean the supervisor died.
     */
    default void onWindowDone(Request request) throws Exception {}
}
