package org.etlstage.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import org.junit.jupiter.api.Test;

/**
 * The in-place API's guarantees beyond the vectors (VectorsTest runs every T vector through
 * it too): results are checked for markers on every path, a failed request sends the
 * answers completed before it and nothing of its own, a batch cannot be read after its call.
 */
class BatchTransformerTest {
    static Scenario scenario(String mode) throws WorkerException {
        return Scenario.fromEnv(Map.of("ETLSTAGE_TYPE", "T", "ETLSTAGE_MODE", mode));
    }

    static void serve(BatchTransformer w, String mode, String input, ByteArrayOutputStream out) throws Exception {
        Serve.batchTransformer(w, scenario(mode), new ByteArrayInputStream(input.getBytes()), out);
    }

    static String written(ByteArrayOutputStream out) {
        return Output.escape(out.toByteArray(), 0, out.size());
    }

    /**
     * Echoes each message, but a message "bad" first emits "ok" and then what {@code bad}
     * gives: the request fails after one clean result.
     */
    static final class EchoUntilBad implements BatchTransformer {
        final Function<Output, Exception> bad;
        boolean tornDown;

        EchoUntilBad(Function<Output, Exception> bad) {
            this.bad = bad;
        }

        @Override
        public void process(Batch b, Output out) throws Exception {
            byte[] a = b.array();
            for (int i = 0; i < b.size(); i++) {
                if (new String(a, b.offset(i), b.length(i)).equals("bad")) {
                    out.emit("ok");
                    Exception e = bad.apply(out);
                    if (e != null) throw e;
                }
                out.emit(a, b.offset(i), b.length(i));
            }
        }

        @Override
        public void teardown() {
            tornDown = true;
        }
    }

    static Exception emitQuietly(Output out, Object result) {
        try {
            if (result instanceof ByteBuffer bb) out.emit(bb);
            else out.emit((byte[]) result, 0, ((byte[]) result).length);
            return null;
        } catch (Exception e) {
            return e;
        }
    }

    static final List<Object> MARKED = List.of(
            "x\ny".getBytes(), // EOM, from an array
            "x\0y".getBytes(), // EOP
            ByteBuffer.wrap("x\u0017y".getBytes()).asReadOnlyBuffer(), // EOB, from a buffer without an array
            ByteBuffer.allocateDirect(3).put((byte) 'x').put((byte) 0x11).put((byte) 'y').flip()); // BNC, direct

    @Test
    void aResultHoldingAMarkerIsRefusedAfterTheAnswersBefore() throws Exception {
        for (String mode : List.of("single", "batch")) {
            for (Object result : MARKED) {
                EchoUntilBad w = new EchoUntilBad(out -> emitQuietly(out, result));
                ByteArrayOutputStream out = new ByteArrayOutputStream();
                String input = mode.equals("single") ? "a\nb\nbad\nc\n" : "a\nb\n\u0017c\nbad\n\u0017d\n\u0017";
                WorkerException e = assertThrows(WorkerException.class, () -> serve(w, mode, input, out));
                assertEquals(WorkerException.PROTOCOL, e.exitCode(), e.getMessage());
                assertTrue(e.getMessage().contains("contains its"), e.getMessage());
                String want = mode.equals("single") ? "a\\n\\x00b\\n\\x00" : "a\\nb\\n\\x00";
                assertEquals(want, written(out), mode + ": the answers before the failed one, nothing of it");
                assertTrue(w.tornDown);
            }
        }
    }

    @Test
    void aFailedBatchWritesNeitherItsResultsNorEop() throws Exception {
        for (String mode : List.of("single", "batch")) {
            EchoUntilBad w = new EchoUntilBad(out -> new IllegalStateException("cannot transform"));
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            String input = mode.equals("single") ? "a\nbad\nc\n" : "a\n\u0017bad\nc\n\u0017";
            assertThrows(IllegalStateException.class, () -> serve(w, mode, input, out));
            assertEquals("a\\n\\x00", written(out), mode);
            assertTrue(w.tornDown);
        }
    }

    @Test
    void aCheckedExceptionFailsTheWorkerWithExit1() {
        EchoUntilBad w = new EchoUntilBad(out -> new Exception("the lookup table is gone"));
        WorkerException e = assertThrows(WorkerException.class,
                () -> serve(w, "batch", "bad\n\u0017", new ByteArrayOutputStream()));
        assertEquals(WorkerException.FAILED, e.exitCode());
    }

    @Test
    void aBatchIsReadableOnlyDuringItsCall() throws Exception {
        List<Batch> seen = new ArrayList<>();
        List<byte[]> kept = new ArrayList<>();
        List<String> views = new ArrayList<>();
        BatchTransformer w = (b, out) -> {
            seen.add(b);
            assertThrows(IndexOutOfBoundsException.class, () -> b.offset(b.size()));
            assertThrows(IndexOutOfBoundsException.class, () -> b.length(-1));
            for (int i = 0; i < b.size(); i++) {
                kept.add(b.copy(i));
                ByteBuffer v = b.message(i);
                assertTrue(v.isReadOnly());
                byte[] text = new byte[v.remaining()];
                v.get(text);
                views.add(new String(text));
            }
        };
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        serve(w, "batch", "ab\ncd\n\u0017ef\n\u0017", out);
        assertEquals("\\x00\\x00", written(out));
        assertEquals(List.of("ab", "cd", "ef"), views);
        assertEquals(List.of("ab", "cd", "ef"), kept.stream().map(String::new).toList(), "copies are the worker's");
        for (Batch b : seen) {
            assertEquals(0, b.size(), "a batch is empty after its call");
            assertEquals(0, b.array().length);
            assertThrows(IndexOutOfBoundsException.class, () -> b.offset(0));
        }
    }

    @Test
    void emitOfAByteBufferTakesItsRemainingBytes() throws Exception {
        BatchTransformer w = (b, out) -> {
            for (int i = 0; i < b.size(); i++) {
                ByteBuffer m = b.message(i);
                m.position(1);
                out.emit(m);
                assertEquals(m.limit(), m.position(), "consumed");
                out.emit(ByteBuffer.wrap("[x]".getBytes(), 1, 1)); // with an array: its remaining bytes only
            }
        };
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        serve(w, "single", "abc\n", out);
        assertEquals("bc\\nx\\n\\x00", written(out));
    }
}
