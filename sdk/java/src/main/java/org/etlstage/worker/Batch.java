package org.etlstage.worker;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.Objects;

/**
 * The messages of one request to a {@link BatchTransformer}, in the SDK's read buffer
 * (EOM removed): message {@code i} is {@code array()[offset(i)]} to
 * {@code array()[offset(i) + length(i) - 1]}.  Valid only during the {@code process}
 * call: afterwards the batch is empty and the buffer holds the next input.  Copy what
 * you keep ({@link #copy}).  You may change a message's own bytes in place (its
 * {@code length(i)} bytes from {@code offset(i)}), never any other byte of the array.
 */
public final class Batch {
    private static final byte[] NONE = new byte[0];

    private byte[] buf = NONE;
    private int[] starts;
    private int[] ends;
    private int size;

    Batch() {}

    void open(byte[] buf, int[] starts, int[] ends, int size) {
        this.buf = buf;
        this.starts = starts;
        this.ends = ends;
        this.size = size;
    }

    void close() {
        buf = NONE;
        size = 0;
    }

    /** The number of messages. */
    public int size() {
        return size;
    }

    /** The buffer the messages are in (not a copy). */
    public byte[] array() {
        return buf;
    }

    /** Where message {@code i} starts in {@link #array()}. */
    public int offset(int i) {
        return starts[Objects.checkIndex(i, size)];
    }

    /** How many bytes message {@code i} has. */
    public int length(int i) {
        Objects.checkIndex(i, size);
        return ends[i] - starts[i];
    }

    /** Message {@code i} as a read-only buffer over the SDK's bytes (position 0, limit its length). */
    public ByteBuffer message(int i) {
        return ByteBuffer.wrap(buf, offset(i), length(i)).slice().asReadOnlyBuffer();
    }

    /** Message {@code i} in a fresh array of its own, to keep after the call. */
    public byte[] copy(int i) {
        Objects.checkIndex(i, size);
        return Arrays.copyOfRange(buf, starts[i], ends[i]);
    }
}
