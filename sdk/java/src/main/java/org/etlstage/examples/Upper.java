package org.etlstage.examples;

import java.util.List;
import org.etlstage.worker.Etlstage;
import org.etlstage.worker.Output;
import org.etlstage.worker.Report;
import org.etlstage.worker.Transformer;

/** A transformer: each message with ASCII letters in upper case (other bytes kept, so UTF-8 stays UTF-8). */
public final class Upper implements Transformer {
    private long seen;

    @Override
    public void process(List<byte[]> messages, Output out) throws Exception {
        for (byte[] m : messages) {
            byte[] r = m.clone();
            for (int i = 0; i < r.length; i++) {
                if (r[i] >= 'a' && r[i] <= 'z') r[i] -= 'a' - 'A';
            }
            out.emit(r);
        }
        seen += messages.size();
    }

    @Override
    public Report report() {
        return new Report().count("upper", seen);
    }

    public static void main(String[] args) {
        Etlstage.runTransformer(new Upper());
    }
}
