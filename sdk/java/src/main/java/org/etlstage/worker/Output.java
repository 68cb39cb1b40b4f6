package org.etlstage.worker;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * Where a worker's results go: each checked for marker bytes, framed with EOM and
 * written as whole blocks.  Nothing else reaches the supervisor but the SDK's markers.
 */
public final class Output {
    private static final int BLOCK = 1 << 18;

    private final OutputStream sink;
    private final Markers markers;
    private final ByteSet markerBytes;
    private final String stage;
    private byte[] buf = new byte[BLOCK + 4096];
    private int len;
    private int answered; // bytes of buf up to the last EOP or BNC

    Output(OutputStream sink, Markers markers, String stage) {
        this.sink = sink;
        this.markers = markers;
        this.stage = stage;
        this.markerBytes = new ByteSet(markers);
    }

    /** One result.  A result holding a marker byte is refused: the worker stops with exit 3. */
    public void emit(byte[] message) throws WorkerException, IOException {
        emit(message, 0, message.length);
    }

    public void emit(byte[] message, int offset, int length) throws WorkerException, IOException {
        if (!markerBytes.clean(message, offset, offset + length)) {
            throw markerIn(message, offset, length, markerBytes.find(message, offset, offset + length));
        }
        room(length);
        System.arraycopy(message, offset, buf, len, length);
        len += length;
        buf[len++] = markers.eom();
        if (len >= BLOCK) drain();
    }

    /**
     * The remaining bytes of {@code message} as one result (a {@link Batch#message} view, a
     * slice of one, any buffer); its position moves to its limit.
     */
    public void emit(ByteBuffer message) throws WorkerException, IOException {
        int length = message.remaining();
        if (message.hasArray()) {
            emit(message.array(), message.arrayOffset() + message.position(), length);
        } else {
            room(length);
            message.get(message.position(), buf, len, length); // copied first, checked in place
            if (!markerBytes.clean(buf, len, len + length)) {
                throw markerIn(buf, len, length, markerBytes.find(buf, len, len + length));
            }
            len += length;
            buf[len++] = markers.eom();
            if (len >= BLOCK) drain();
        }
        message.position(message.limit());
    }

    /** Room for a result of {@code length} bytes and its EOM after {@code len}. */
    private void room(int length) throws IOException {
        if (len + length + 1 > buf.length) {
            if (len > 0) drain();
            if (length + 1 > buf.length) buf = Arrays.copyOf(buf, length + 1);
        }
    }

    /** A text result, as UTF-8. */
    public void emit(String message) throws WorkerException, IOException {
        emit(message.getBytes(StandardCharsets.UTF_8));
    }

    void signal(byte marker) throws IOException {
        if (len == buf.length) drain();
        buf[len++] = marker;
        answered = len;
    }

    /**
     * When the worker fails: send the answers it completed, not the failed request's
     * results (the supervisor sends that request again).
     */
    void flushAnswered() {
        len = answered;
        try {
            flush();
        } catch (IOException e) {
            // the worker is failing already; its own error is the one to report
        }
    }

    void flush() throws IOException {
        drain();
        sink.flush();
    }

    private void drain() throws IOException {
        if (len > 0) {
            sink.write(buf, 0, len);
            len = 0;
            answered = 0;
        }
    }

    private WorkerException markerIn(byte[] m, int offset, int length, int at) {
        byte b = m[at];
        int from = Math.max(offset, at - 24);
        int to = Math.min(offset + length, at + 24);
        return WorkerException.protocol(String.format(
                "a result for stage \"%s\" contains its %s marker 0x%02x at byte %d: %s; messages must not "
                        + "contain marker bytes (choose other markers, or encode the data)",
                stage, markers.nameOf(b), b, at - offset, escape(m, from, to)));
    }

    static String escape(byte[] bytes, int from, int to) {
        StringBuilder s = new StringBuilder();
        for (int i = from; i < to; i++) {
            int b = bytes[i] & 0xff;
            if (b == '\n') s.append("\\n");
            else if (b == '\t') s.append("\\t");
            else if (b == '\\') s.append("\\\\");
            else if (b < 0x20 || b >= 0x7f) s.append(String.format("\\x%02x", b));
            else s.append((char) b);
        }
        return s.toString();
    }
}
