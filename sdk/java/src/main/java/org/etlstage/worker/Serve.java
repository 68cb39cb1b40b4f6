package org.etlstage.worker;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The worker side of the conversation over any {@link InputStream} / {@link OutputStream}:
 * read big chunks, split them at the markers, call the worker, write results as blocks,
 * flush after each chunk and each EOP.  Returns on a clean end of input.
 */
public final class Serve {
    private static final int CHUNK = 1 << 16;

    private final Worker worker;
    private final Scenario sc;
    private final InputStream in;
    private final Output out;
    private final Markers m;
    private final ByteSet special;
    private final Transformer transformer;
    private final BatchTransformer batchTransformer; // or this one, reading batches in place
    private final Batch batch = new Batch();
    private final Loader loader;

    private byte[] buf = new byte[CHUNK];
    private int filled; // bytes of buf read so far
    private int pos; // bytes of buf scanned for markers
    private int msgStart; // where the message being read starts
    private int[] starts = new int[16]; // the open batch's messages
    private int[] ends = new int[16];
    private int open;
    private long cycle;

    private Serve(Worker worker, boolean inPlace, Scenario sc, InputStream in, OutputStream out) {
        this.worker = worker;
        this.sc = sc;
        this.in = in;
        this.out = new Output(out, sc.markers(), sc.stage());
        this.m = sc.markers();
        this.special = new ByteSet(m);
        boolean t = sc.type() == Scenario.StageType.T;
        this.transformer = t && !inPlace ? (Transformer) worker : null;
        this.batchTransformer = t && inPlace ? (BatchTransformer) worker : null;
        this.loader = sc.type() == Scenario.StageType.L ? (Loader) worker : null;
    }

    public static void extractor(Extractor w, Scenario sc, InputStream in, OutputStream out)
            throws WorkerException, IOException {
        serve(w, false, Scenario.StageType.E, sc, in, out);
    }

    public static void transformer(Transformer w, Scenario sc, InputStream in, OutputStream out)
            throws WorkerException, IOException {
        serve(w, false, Scenario.StageType.T, sc, in, out);
    }

    /** A T-worker that reads each batch in place ({@link Batch}): no copy per message. */
    public static void batchTransformer(BatchTransformer w, Scenario sc, InputStream in, OutputStream out)
            throws WorkerException, IOException {
        serve(w, true, Scenario.StageType.T, sc, in, out);
    }

    public static void loader(Loader w, Scenario sc, InputStream in, OutputStream out)
            throws WorkerException, IOException {
        serve(w, false, Scenario.StageType.L, sc, in, out);
    }

    private static void serve(Worker w, boolean inPlace, Scenario.StageType kind, Scenario sc, InputStream in,
            OutputStream out) throws WorkerException, IOException {
        if (sc.type() != kind) {
            throw WorkerException.config("stage \"" + sc.stage() + "\" is an " + sc.type()
                    + "-stage (ETLSTAGE_TYPE) but this worker is an " + kind + "-worker");
        }
        Serve s = new Serve(w, inPlace, sc, in, out);
        s.call(SETUP, null);
        try {
            s.conversation();
        } catch (WorkerException | IOException | RuntimeException e) {
            s.out.flushAnswered();
            throw e;
        } finally {
            s.call(TEARDOWN, null);
        }
    }

    private static final int SETUP = 0;
    private static final int TEARDOWN = 1;
    private static final int EXTRACT = 2;
    private static final int WINDOW_DONE = 3;

    /**
     * A hook of the worker's own code: its failures become exit 1, naming what failed.
     * (A switch, not lambdas: nothing at start-up bootstraps a lambda.)
     */
    private void call(int hook, Request request) throws WorkerException, IOException {
        try {
            switch (hook) {
                case SETUP -> worker.setup(sc);
                case TEARDOWN -> worker.teardown();
                case EXTRACT -> ((Extractor) worker).extract(request, out);
                default -> ((Extractor) worker).onWindowDone(request);
            }
        } catch (WorkerException | IOException | RuntimeException e) {
            throw e;
        } catch (Exception e) {
            throw failed(e);
        }
    }

    private static WorkerException failed(Exception e) {
        WorkerException w = new WorkerException(WorkerException.FAILED, e.toString());
        w.initCause(e);
        return w;
    }

    private void conversation() throws WorkerException, IOException {
        if (sc.mode() == Scenario.Mode.PLAIN) {
            call(EXTRACT, null);
            report();
            out.flush();
            return;
        }
        while (true) {
            int keep = open > 0 ? starts[0] : msgStart; // keep the open batch and the message being read
            if (keep > 0) {
                System.arraycopy(buf, keep, buf, 0, filled - keep);
                filled -= keep;
                pos -= keep;
                msgStart -= keep;
                for (int i = 0; i < open; i++) {
                    starts[i] -= keep;
                    ends[i] -= keep;
                }
            }
            if (buf.length - filled < CHUNK / 2) buf = Arrays.copyOf(buf, Math.max(buf.length * 2, filled + CHUNK));
            int n = in.read(buf, filled, buf.length - filled);
            if (n < 0) {
                if (open > 0 || msgStart < filled) {
                    System.err.printf("stage \"%s\": stdin closed with an unfinished batch (%d messages, %d bytes):"
                            + " not processed; the supervisor will send it again%n", sc.stage(), open, filled - msgStart);
                }
                return;
            }
            filled += n;
            scan();
            pos = filled;
            out.flush();
        }
    }

    private void scan() throws WorkerException, IOException {
        int at;
        while ((at = special.find(buf, pos, filled)) >= 0) {
            byte b = buf[at];
            pos = at + 1;
            if (b == m.eom()) {
                int start = msgStart;
                msgStart = pos;
                message(start, at);
            } else if (b == m.eob()) {
                if (sc.mode() != Scenario.Mode.BATCH) {
                    throw WorkerException.protocol(String.format("EOB (0x%02x) received by a %s-worker in %s mode",
                            b, sc.type(), sc.mode().toString().toLowerCase()));
                }
                if (msgStart < at) {
                    throw WorkerException.protocol("EOB arrived in the middle of a message (its bytes were not ended "
                            + "by EOM): " + Output.escape(buf, Math.max(msgStart, at - 40), at + 1));
                }
                msgStart = pos;
                runBatch();
                out.flush(); // acknowledge now, not after the next batch
            } else {
                throw WorkerException.protocol(String.format(
                        "the supervisor's input holds %s (0x%02x), which only a worker may write: %s",
                        m.nameOf(b), b, Output.escape(buf, Math.max(0, at - 24), Math.min(filled, at + 24))));
            }
        }
    }

    private void message(int start, int end) throws WorkerException, IOException {
        if (sc.type() == Scenario.StageType.E) {
            cycle(start, end);
        } else if (sc.mode() == Scenario.Mode.SINGLE) {
            if (batchTransformer != null) {
                starts[0] = start;
                ends[0] = end;
                open = 1;
                runBatch();
            } else {
                handle(List.of(Arrays.copyOfRange(buf, start, end)));
            }
        } else {
            if (open == starts.length) {
                starts = Arrays.copyOf(starts, open * 2);
                ends = Arrays.copyOf(ends, open * 2);
            }
            starts[open] = start;
            ends[open] = end;
            open++;
            if (sc.workerDriven()) {
                if (open >= sc.batchSize()) {
                    runBatch();
                    out.flush();
                } else {
                    out.signal(m.bnc());
                }
            }
        }
    }

    /** One request of a cyclic extractor. */
    private void cycle(int start, int end) throws WorkerException, IOException {
        Request request = Request.parse(Arrays.copyOfRange(buf, start, end), cycle);
        if (cycle > 0) call(WINDOW_DONE, request);
        call(EXTRACT, request);
        report();
        out.signal(m.eop());
        out.flush();
        cycle++;
    }

    private void runBatch() throws WorkerException, IOException {
        if (open == 0) {
            out.signal(m.eop());
            return;
        }
        if (batchTransformer != null) {
            batch.open(buf, starts, ends, open);
            open = 0;
            try {
                batchTransformer.process(batch, out);
            } catch (WorkerException | IOException | RuntimeException e) {
                throw e;
            } catch (Exception e) {
                throw failed(e);
            } finally {
                batch.close();
            }
            report();
            out.signal(m.eop());
            return;
        }
        List<byte[]> messages = new ArrayList<>(open);
        for (int i = 0; i < open; i++) messages.add(Arrays.copyOfRange(buf, starts[i], ends[i]));
        open = 0;
        if (loader != null && sc.batchId() && !sc.workerDriven()) {
            String id = FileSink.batchIdOf(messages.get(0));
            if (messages.size() == 1) { // an empty batch: its header alone, acknowledged without a load
                out.signal(m.eop());
                return;
            }
            try {
                loader.loadBatch(id, messages.subList(1, messages.size()));
            } catch (WorkerException | IOException | RuntimeException e) {
                throw e;
            } catch (Exception e) {
                throw failed(e);
            }
            report();
            out.signal(m.eop());
            return;
        }
        handle(messages);
    }

    /** One request of a T- or L-worker: results (or the load), the report, then EOP. */
    private void handle(List<byte[]> messages) throws WorkerException, IOException {
        try {
            if (transformer != null) transformer.process(messages, out);
            else loader.load(messages);
        } catch (WorkerException | IOException | RuntimeException e) {
            throw e;
        } catch (Exception e) {
            throw failed(e);
        }
        report();
        out.signal(m.eop());
    }

    /** The worker's counters, written before the EOP of the request they include. */
    private void report() throws IOException {
        Report r = worker.report();
        if (r != null && !sc.stateDir().isEmpty()) r.writeTo(sc.stateDir(), sc.instance());
    }
}
