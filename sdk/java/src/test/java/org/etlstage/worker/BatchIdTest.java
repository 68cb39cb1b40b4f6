package org.etlstage.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Batch ids (ETLSTAGE_BATCH_ID=1): the header is stripped and its id given to loadBatch; FileSink commits once. */
class BatchIdTest {
    static final String ID = "0123456789abcdef0123456789abcdef";

    static final class Seen implements Loader {
        final List<String> got = new ArrayList<>();

        @Override
        public void load(List<byte[]> messages) {
            loadBatch("", messages);
        }

        @Override
        public void loadBatch(String id, List<byte[]> messages) {
            StringBuilder row = new StringBuilder(id);
            for (byte[] m : messages) row.append('|').append(new String(m, StandardCharsets.UTF_8));
            got.add(row.toString());
        }
    }

    static Scenario scenario(String batchId) throws WorkerException {
        return Scenario.fromEnv(Map.of("ETLSTAGE_TYPE", "L", "ETLSTAGE_MODE", "batch", "ETLSTAGE_BATCH_SIZE", "2",
                "ETLSTAGE_BATCH_ID", batchId));
    }

    static ByteArrayInputStream in(String s) {
        return new ByteArrayInputStream(s.getBytes(StandardCharsets.ISO_8859_1));
    }

    @Test
    void theHeaderIsStrippedAndItsIdGivenToLoadBatch() throws Exception {
        Seen w = new Seen();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        String f = "f".repeat(32);
        Serve.loader(w, scenario("1"), in("etlstage-batch-id " + ID + "\na\nb\n\u0017etlstage-batch-id " + f + "\nc\n\u0017"), out);
        assertEquals(List.of(ID + "|a|b", f + "|c"), w.got);
        assertEquals("\\x00\\x00", Output.escape(out.toByteArray(), 0, out.size()));
    }

    @Test
    void withoutBatchIdsTheFirstMessageIsAMessage() throws Exception {
        Seen w = new Seen();
        Serve.loader(w, scenario("0"), in("etlstage-batch-id " + ID + "\na\n\u0017"), new ByteArrayOutputStream());
        assertEquals(List.of("|etlstage-batch-id " + ID + "|a"), w.got);
    }

    @Test
    void aBatchWithoutItsHeaderIsAViolation() throws Exception {
        Seen w = new Seen();
        WorkerException e = assertThrows(WorkerException.class,
                () -> Serve.loader(w, scenario("1"), in("a\nb\n\u0017"), new ByteArrayOutputStream()));
        assertEquals(WorkerException.PROTOCOL, e.exitCode());
        assertTrue(w.got.isEmpty());
    }

    @Test
    void theFileSinkCommitsABatchOnce(@TempDir Path dir) throws Exception {
        FileSink sink = new FileSink(dir);
        List<byte[]> batch = List.of("a".getBytes(), "b".getBytes());
        assertTrue(sink.commit(ID, batch));
        assertFalse(sink.commit(ID, batch));
        assertEquals("a\nb\n", Files.readString(sink.path(ID)));
        try (var files = Files.list(dir)) {
            assertEquals(1, files.count());
        }
        assertThrows(IllegalArgumentException.class, () -> sink.commit("", batch));
    }
}
