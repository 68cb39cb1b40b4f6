package org.etlstage.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Arrays;
import org.junit.jupiter.api.Test;

class ByteSetTest {
    @Test
    void findsTheFirstMarkerAtEveryPosition() {
        ByteSet set = new ByteSet(Markers.DEFAULT);
        for (int len = 0; len < 40; len++) {
            for (int at = 0; at < len; at++) {
                byte[] data = new byte[len];
                Arrays.fill(data, (byte) 'x');
                data[at] = 0x17;
                if (at + 3 < len) data[at + 3] = '\n';
                assertEquals(at, set.find(data, 0, len));
                assertEquals(at + 3 < len ? at + 3 : -1, set.find(data, at + 1, len));
                assertEquals(false, set.clean(data, 0, len));
                assertEquals(at + 3 >= len, set.clean(data, at + 1, len));
            }
            byte[] none = new byte[len];
            Arrays.fill(none, (byte) 0xff);
            assertEquals(-1, set.find(none, 0, len));
            assertEquals(true, set.clean(none, 0, len));
        }
        // bytes just above a marker (0x01 above 0x00, 0x12 above 0x11) are no hit
        byte[] near = {0x01, 0x12, 0x0b, 0x18, (byte) 0x81, (byte) 0x90, (byte) 0x91, (byte) 0x80, 0x11};
        assertEquals(8, set.find(near, 0, near.length));
    }
}
