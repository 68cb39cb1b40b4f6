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
 * An extractor of numbered records: {@code Counter [PER_CYCLE] [TOTAL]} (3 and no limit by
 * default).  Plain mode emits records 0..TOTAL (PER_CYCLE of them without a TOTAL).
 * Cyclic with worker-managed offsets: the next PER_CYCLE records each cycle, up to TOTAL;
 * the next number is committed to {@code offset-<instance>} in the stage's state folder
 * once a cycle's window is done (a new request came), never on end of input.  Cyclic with
 * supervisor-managed offsets: records S..E-1 of the request's window.
 */
public final class Counter implements Extractor {
    private final long perCycle;
    private final long total;
    private long next;
    private Path committed;

    Counter(long perCycle, long total) {
        this.perCycle = perCycle;
        this.total = total;
    }

    @Override
    public void setup(Scenario sc) throws Exception {
        if (sc.stateDir().isEmpty()) return;
        committed = Path.of(sc.stateDir(), "offset-" + sc.instance());
        if (Files.exists(committed)) next = Long.parseLong(Files.readString(committed).trim());
    }

    @Override
    public void extract(Request request, Output out) throws Exception {
        long from;
        long to;
        boolean window = request != null && request.start() != null && request.end() != null;
        if (window) {
            from = Long.parseLong(request.start());
            to = Long.parseLong(request.end());
        } else if (request == null) {
            from = 0;
            to = total < Long.MAX_VALUE ? total : perCycle;
        } else {
            from = next;
            to = next + perCycle;
        }
        to = Math.min(to, total);
        for (long n = from; n < to; n++) out.emit("record " + n);
        if (!window) next = Math.max(next, to);
    }

    @Override
    public void onWindowDone(Request request) throws Exception {
        if (committed == null) return;
        Path tmp = Path.of(committed + ".tmp");
        Files.writeString(tmp, Long.toString(next));
        Files.move(tmp, committed, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    public static void main(String[] args) {
        long perCycle = args.length > 0 ? Long.parseLong(args[0]) : 3;
        long total = args.length > 1 ? Long.parseLong(args[1]) : Long.MAX_VALUE;
        Etlstage.runExtractor(new Counter(perCycle, total));
    }
}
