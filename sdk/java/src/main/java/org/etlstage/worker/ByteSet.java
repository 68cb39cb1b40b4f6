package org.etlstage.worker;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;

/** Finds the first of four bytes (the markers) eight bytes at a time, with no per-byte branch. */
final class ByteSet {
    private static final VarHandle LONGS = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
    private static final long LO = 0x0101_0101_0101_0101L;
    private static final long HI = 0x8080_8080_8080_8080L;

    private final long w0;
    private final long w1;
    private final long w2;
    private final long w3;
    private final boolean[] table = new boolean[256];

    ByteSet(Markers m) {
        w0 = LO * (m.eom() & 0xff);
        w1 = LO * (m.eop() & 0xff);
        w2 = LO * (m.eob() & 0xff);
        w3 = LO * (m.bnc() & 0xff);
        for (byte b : new byte[] {m.eom(), m.eop(), m.eob(), m.bnc()}) table[b & 0xff] = true;
    }

    /** Whether {@code a[from:to]} holds no marker: no branch per word, the tail as one overlapping word. */
    boolean clean(byte[] a, int from, int to) {
        if (to - from < 8) {
            for (int i = from; i < to; i++) {
                if (table[a[i] & 0xff]) return false;
            }
            return true;
        }
        long acc = 0;
        for (int i = from; i < to - 8; i += 8) acc |= flags((long) LONGS.get(a, i));
        acc |= flags((long) LONGS.get(a, to - 8));
        return (acc & HI) == 0;
    }

    /** A high bit in each byte equal to a marker (and maybe above one: only "any" is exact). */
    private long flags(long w) {
        long x0 = w ^ w0;
        long x1 = w ^ w1;
        long x2 = w ^ w2;
        long x3 = w ^ w3;
        return ((x0 - LO) & ~x0) | ((x1 - LO) & ~x1) | ((x2 - LO) & ~x2) | ((x3 - LO) & ~x3);
    }

    /** The index of the first byte of {@code a[from:to]} that is a marker, or -1. */
    int find(byte[] a, int from, int to) {
        if (to - from < 8) {
            for (int i = from; i < to; i++) {
                if (table[a[i] & 0xff]) return i;
            }
            return -1;
        }
        int i = from;
        for (; i + 8 <= to; i += 8) {
            long hit = flags((long) LONGS.get(a, i)) & HI;
            if (hit != 0) return i + (Long.numberOfTrailingZeros(hit) >>> 3); // the lowest flag is exact
        }
        if (i == to) return -1;
        // the tail as the last eight bytes: those before i hold no marker, so the lowest flag is in the tail
        long hit = flags((long) LONGS.get(a, to - 8)) & HI;
        return hit == 0 ? -1 : to - 8 + (Long.numberOfTrailingZeros(hit) >>> 3);
    }
}
