package org.etlstage.worker;

import java.util.List;

/** An L-worker: returning means the batch is durably loaded; only then is EOP written. */
@FunctionalInterface
public interface Loader extends Worker {
    void load(List<byte[]> messages) throws Exception;

    /**
     * A batch with its id (a stage with {@code batch_id: true}): the same whenever the same
     * messages are sent again, never the same for other messages. Commit it with the data
     * ({@link FileSink}) to load idempotently. By default the id is dropped: {@link #load}.
     */
    default void loadBatch(String batchId, List<byte[]> messages) throws Exception {
        load(messages);
    }
}
