package org.etlstage.worker;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Counters for the supervisor's end-of-run summary: numbers, or one level of named
 * numbers, counting from the start of this process.
 * {@code new Report().count("valid", 12).named("invalid", "GENERR004", 2)}; and, for a
 * loader, where it loads: {@code .output("out/batches")}.
 */
public final class Report {
    private final Map<String, Object> entries = new LinkedHashMap<>();

    public Report count(String name, Number value) {
        entries.put(name, value);
        return this;
    }

    @SuppressWarnings("unchecked")
    public Report named(String name, String key, Number value) {
        Object group = entries.get(name);
        if (!(group instanceof Map)) {
            group = new LinkedHashMap<String, Number>();
            entries.put(name, group);
        }
        ((Map<String, Number>) group).put(key, value);
        return this;
    }

    /**
     * Where the worker loads (a path, a table, a topic): the run's summary names it, and
     * {@code etlstage check-worker --batch-id} measures it when it is a file or folder.
     */
    public Report output(String place) {
        entries.remove("output");
        entries.put("output", place);
        return this;
    }

    public String toJson() {
        StringBuilder s = new StringBuilder("{");
        boolean first = true;
        for (Map.Entry<String, Object> e : entries.entrySet()) {
            if (!first) s.append(", ");
            first = false;
            quote(s, e.getKey()).append(": ");
            if (e.getValue() instanceof Map<?, ?> group) {
                s.append('{');
                boolean firstKey = true;
                for (Map.Entry<?, ?> g : group.entrySet()) {
                    if (!firstKey) s.append(", ");
                    firstKey = false;
                    quote(s, (String) g.getKey()).append(": ").append(number((Number) g.getValue()));
                }
                s.append('}');
            } else if (e.getValue() instanceof String text) {
                quote(s, text);
            } else {
                s.append(number((Number) e.getValue()));
            }
        }
        return s.append('}').toString();
    }

    /** {@code report-<instance>-<pid>.json} in {@code stateDir}, replaced atomically. */
    public void writeTo(String stateDir, int instance) throws IOException {
        Path path = Path.of(stateDir, "report-" + instance + "-" + ProcessHandle.current().pid() + ".json");
        Path tmp = Path.of(path + ".tmp");
        Files.writeString(tmp, toJson(), StandardCharsets.UTF_8);
        Files.move(tmp, path, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    private static String number(Number n) {
        if (n instanceof Double || n instanceof Float) {
            double d = n.doubleValue();
            return Double.isFinite(d) ? Double.toString(d) : "null";
        }
        return n.toString();
    }

    private static StringBuilder quote(StringBuilder s, String text) {
        s.append('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c == '"' || c == '\\') s.append('\\').append(c);
            else if (c < 0x20) s.append(String.format("\\u%04x", (int) c));
            else s.append(c);
        }
        return s.append('"');
    }
}
