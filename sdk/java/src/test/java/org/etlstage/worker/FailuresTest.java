package org.etlstage.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * What the vectors do not show: a failing worker never acknowledges the request it failed
 * on, and its teardown still runs.
 */
class FailuresTest {
    static final class Flaky implements Transformer, Loader {
        int calls;
        boolean tornDown;

        @Override
        public void process(List<byte[]> messages, Output out) throws Exception {
            out.emit(messages.get(0));
            if (++calls == 2) throw new IllegalStateException("cannot transform");
        }

        @Override
        public void load(List<byte[]> messages) throws Exception {
            if (++calls == 2) throw new java.io.IOException("the database went away");
        }

        @Override
        public void teardown() {
            tornDown = true;
        }
    }

    static Scenario scenario(String type) throws WorkerException {
        return Scenario.fromEnv(Map.of("ETLSTAGE_TYPE", type, "ETLSTAGE_MODE", "single"));
    }

    static ByteArrayInputStream input() {
        return new ByteArrayInputStream("a\nb\nc\n".getBytes());
    }

    @Test
    void aFailedLoadIsNotAcknowledged() throws Exception {
        Flaky w = new Flaky();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        Exception e = assertThrows(java.io.IOException.class, () -> Serve.loader(w, scenario("L"), input(), out));
        assertEquals("the database went away", e.getMessage());
        assertEquals("\\x00", Output.escape(out.toByteArray(), 0, out.size()), "one EOP, for the first batch only");
        assertTrue(w.tornDown);
    }

    @Test
    void aFailedTransformWritesNeitherItsResultsNorEop() throws Exception {
        Flaky w = new Flaky();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        assertThrows(IllegalStateException.class, () -> Serve.transformer(w, scenario("T"), input(), out));
        assertEquals("a\\n\\x00", Output.escape(out.toByteArray(), 0, out.size()));
        assertTrue(w.tornDown);
    }

    @Test
    void aWorkerOfTheWrongTypeIsRefused() {
        WorkerException e = assertThrows(WorkerException.class,
                () -> Serve.loader(new Flaky(), scenario("T"), input(), new ByteArrayOutputStream()));
        assertEquals(WorkerException.CONFIG, e.exitCode());
    }
}
