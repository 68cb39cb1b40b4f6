package org.etlstage.examples;

import org.etlstage.worker.Batch;
import org.etlstage.worker.BatchTransformer;
import org.etlstage.worker.Etlstage;
import org.etlstage.worker.Output;

/**
 * {@link Passthrough} on the in-place batch API ({@link org.etlstage.worker.BatchTransformer}):
 * each message is its own result, read where the SDK read it (bench/sdk_throughput.py).
 */
public final class PassthroughInPlace implements BatchTransformer {
    @Override
    public void process(Batch batch, Output out) throws Exception {
        byte[] a = batch.array();
        for (int i = 0; i < batch.size(); i++) out.emit(a, batch.offset(i), batch.length(i));
    }

    public static void main(String[] args) {
        Etlstage.runBatchTransformer(new PassthroughInPlace());
    }
}
