package org.etlstage.worker;

/** The four marker bytes of a stage (docs/protocol.md: markers). */
public record Markers(byte eom, byte eop, byte eob, byte bnc) {
    public static final Markers DEFAULT = new Markers((byte) 0x0a, (byte) 0x00, (byte) 0x17, (byte) 0x11);

    /** The marker's name for a byte that is one of them, else null. */
    String nameOf(byte b) {
        if (b == eom) return "EOM";
        if (b == eop) return "EOP";
        if (b == eob) return "EOB";
        if (b == bnc) return "BNC";
        return null;
    }
}
