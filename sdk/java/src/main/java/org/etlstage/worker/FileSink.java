package org.etlstage.worker;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.List;

/**
 * Commits each batch as one file named after its id: written to a temporary name, synced,
 * renamed, the folder synced. A file is there whole or not at all, and a batch whose file
 * is there is not written again (docs/protocol.md: batch ids).
 */
public final class FileSink {
    static final byte[] HEADER = "etlstage-batch-id ".getBytes(StandardCharsets.US_ASCII);

    private final Path dir;
    private final String prefix;
    private final String suffix;

    public FileSink(Path dir) {
        this(dir, "batch-", ".txt");
    }

    public FileSink(Path dir, String prefix, String suffix) {
        this.dir = dir;
        this.prefix = prefix;
        this.suffix = suffix;
    }

    public Path path(String batchId) {
        return dir.resolve(prefix + batchId + suffix);
    }

    /** Writes the batch's file (each message then a newline); false, nothing written, when it was committed before. */
    public boolean commit(String batchId, List<byte[]> messages) throws IOException {
        if (batchId == null || batchId.isEmpty()) {
            throw new IllegalArgumentException("this loader commits each batch with its id, but the batch came without one: "
                    + "give the stage `batch_id: true` (L-stage, mode: batch) in stages.yaml");
        }
        Path last = path(batchId);
        if (Files.exists(last)) return false;
        Files.createDirectories(dir);
        Path tmp = Files.createTempFile(dir, ".tmp-", "");
        try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.WRITE)) {
            for (byte[] m : messages) {
                ch.write(java.nio.ByteBuffer.wrap(m));
                ch.write(java.nio.ByteBuffer.wrap(new byte[] {'\n'}));
            }
            ch.force(true);
        } catch (IOException | RuntimeException e) {
            Files.deleteIfExists(tmp);
            throw e;
        }
        Files.move(tmp, last, StandardCopyOption.ATOMIC_MOVE);
        try (FileChannel d = FileChannel.open(dir, StandardOpenOption.READ)) {
            d.force(true); // the rename itself is durable
        }
        return true;
    }

    /** The id in a batch's header message (the first of each batch under ETLSTAGE_BATCH_ID=1). */
    static String batchIdOf(byte[] first) throws WorkerException {
        boolean ok = first.length == HEADER.length + 32;
        for (int i = 0; ok && i < first.length; i++) {
            byte b = first[i];
            ok = i < HEADER.length ? b == HEADER[i] : (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f');
        }
        if (!ok) {
            String shown = new String(first, 0, Math.min(first.length, 60), StandardCharsets.ISO_8859_1);
            throw WorkerException.protocol("ETLSTAGE_BATCH_ID=1: expected a batch id header (etlstage-batch-id <32 hex digits>) first, got \"" + shown + "\"");
        }
        return new String(first, HEADER.length, 32, StandardCharsets.US_ASCII);
    }
}
