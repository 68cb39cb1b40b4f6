package org.etlstage.examples;

import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.Arrays;

/**
 * The same pass-through written by hand, without the SDK: the benchmark's baseline
 * (bench/sdk_throughput.py).  Default markers; single mode, or batches closed by EOB when
 * ETLSTAGE_MODE=batch.  No checks: it trusts its input.
 */
public final class PassthroughByHand {
    public static void main(String[] args) throws IOException {
        boolean batch = "batch".equals(System.getenv("ETLSTAGE_MODE"));
        final byte eom = '\n';
        final byte eop = 0;
        final byte eob = 0x17;
        InputStream in = new FileInputStream(FileDescriptor.in);
        OutputStream stdout = new FileOutputStream(FileDescriptor.out);
        byte[] buf = new byte[1 << 16];
        byte[] out = new byte[1 << 18];
        int filled = 0;
        while (true) {
            int n = in.read(buf, filled, buf.length - filled);
            if (n < 0) return;
            filled += n;
            int start = 0;
            int len = 0;
            for (int at = 0; at < filled; at++) {
                byte b = buf[at];
                if (b != eom && b != eob) continue;
                int need = at - start + 2;
                if (len + need > out.length) out = Arrays.copyOf(out, Math.max(out.length * 2, len + need));
                if (b == eob) {
                    out[len++] = eop;
                } else {
                    System.arraycopy(buf, start, out, len, at + 1 - start);
                    len += at + 1 - start;
                    if (!batch) out[len++] = eop;
                }
                start = at + 1;
            }
            System.arraycopy(buf, start, buf, 0, filled - start);
            filled -= start;
            if (filled == buf.length) buf = Arrays.copyOf(buf, buf.length * 2);
            stdout.write(out, 0, len);
            stdout.flush();
        }
    }
}
