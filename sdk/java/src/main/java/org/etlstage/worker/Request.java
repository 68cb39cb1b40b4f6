package org.etlstage.worker;

import java.nio.charset.StandardCharsets;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * One cycle request to a cyclic extractor ({@code null} is passed in plain mode).
 *
 * @param raw the request message: empty with worker-managed offsets, else {@code {"start": S, "end": E}}
 * @param cycle 0 for this process's first request
 * @param start a supervisor-managed window's start: the integer's digits or the ISO-8601 text; else null
 * @param end the window's end, likewise
 */
public record Request(byte[] raw, long cycle, String start, String end) {
    private static final Pattern FIELD =
            Pattern.compile("\"(start|end)\"\\s*:\\s*(?:\"([^\"]*)\"|([-+0-9.eE]+))");

    public static Request parse(byte[] raw, long cycle) {
        String start = null;
        String end = null;
        Matcher m = FIELD.matcher(new String(raw, StandardCharsets.UTF_8));
        while (m.find()) {
            String value = m.group(2) != null ? m.group(2) : m.group(3);
            if (m.group(1).equals("start")) start = value;
            else end = value;
        }
        return new Request(raw, cycle, start, end);
    }
}
