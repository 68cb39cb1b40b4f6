package org.etlstage.examples;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import org.etlstage.worker.Etlstage;
import org.etlstage.worker.Extractor;
import org.etlstage.worker.Output;
import org.etlstage.worker.Request;
import org.etlstage.worker.Scenario;

/**
 * An extractor: {@code N} numbered messages per cycle (the first argument, 3 by default);
 * plain mode emits one cycle's worth.  With worker-managed offsets the next number is
 * committed to {@code offset-<instance>} in the stage's state folder once a cycle's
 * window is done (a new request came), never on end of input.
 */
public final class Counter implements Extractor {
    private final int perCycle;
    private long next;
    private Path committed;

    Counter(int perCycle) {
        this.perCycle = perCycle;
    }

    @Override
    public void setup(Scenario sc) throws Exception {
        if (sc.stateDir().isEmpty()) return;
        committed = Path.of(sc.stateDir(), "offset-" + sc.instance());
        if (Files.exists(committed)) next = Long.parseLong(Files.readString(committed).trim());
    }

    @Override
    public void extract(Request request, Output out) throws Exception {
        for (int i = 0; i < perCycle; i++) out.emit("record " + next++);
    }

    @Override
    public void onWindowDone(Request request) throws Exception {
        if (committed == null) return;
        Path tmp = Path.of(committed + ".tmp");
        Files.writeString(tmp, Long.toString(next));
        Files.move(tmp, committed, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    public static void main(String[] args) {
        Etlstage.runExtractor(new Counter(args.length > 0 ? Integer.parseInt(args[0]) : 3));
    }
}
