package org.etlstage.examples;

import java.util.List;
import org.etlstage.worker.Etlstage;
import org.etlstage.worker.Output;
import org.etlstage.worker.Transformer;

/** Each message is its own result: the SDK's cost alone (bench/sdk_throughput.py). */
public final class Passthrough implements Transformer {
    @Override
    public void process(List<byte[]> messages, Output out) throws Exception {
        for (byte[] m : messages) out.emit(m);
    }

    public static void main(String[] args) {
        Etlstage.runTransformer(new Passthrough());
    }
}
