package org.etlstage.worker;

/**
 * A T-worker that reads each batch where the SDK read it (a batch of one in single mode):
 * no copy and no allocation per message.  The {@link Batch} and everything it gives are
 * valid only during the call; results go to {@code out} as for a {@link Transformer},
 * each checked for marker bytes and copied into the SDK's output block.  Run it with
 * {@link Etlstage#runBatchTransformer} (or {@link Serve#batchTransformer} in a test).
 */
@FunctionalInterface
public interface BatchTransformer extends Worker {
    void process(Batch batch, Output out) throws Exception;
}
