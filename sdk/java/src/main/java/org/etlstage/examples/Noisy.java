package org.etlstage.examples;

import java.util.List;
import org.etlstage.worker.Etlstage;
import org.etlstage.worker.Output;
import org.etlstage.worker.Transformer;

/** A pass-through transformer that prints to System.out as careless code does: the SDK sends that to stderr. */
public final class Noisy implements Transformer {
    @Override
    public void process(List<byte[]> messages, Output out) throws Exception {
        System.out.println("processing a batch of " + messages.size());
        for (byte[] m : messages) out.emit(m);
    }

    public static void main(String[] args) {
        Etlstage.runTransformer(new Noisy());
    }
}
