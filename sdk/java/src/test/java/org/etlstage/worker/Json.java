package org.etlstage.worker;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** Just enough JSON to read the test vectors: objects as Map, arrays as List, numbers as Double. */
final class Json {
    private final String s;
    private int i;

    private Json(String s) {
        this.s = s;
    }

    static Object parse(String text) {
        Json p = new Json(text);
        Object v = p.value();
        p.ws();
        if (p.i != text.length()) throw new IllegalArgumentException("trailing text at " + p.i);
        return v;
    }

    private void ws() {
        while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++;
    }

    private boolean eat(String word) {
        if (s.startsWith(word, i)) {
            i += word.length();
            return true;
        }
        return false;
    }

    private void expect(String word) {
        if (!eat(word)) throw new IllegalArgumentException("expected " + word + " at " + i);
    }

    private Object value() {
        ws();
        char c = s.charAt(i);
        if (c == '{') {
            i++;
            Map<String, Object> m = new LinkedHashMap<>();
            ws();
            if (eat("}")) return m;
            while (true) {
                ws();
                String k = string();
                ws();
                expect(":");
                m.put(k, value());
                ws();
                if (eat("}")) return m;
                expect(",");
            }
        }
        if (c == '[') {
            i++;
            List<Object> a = new ArrayList<>();
            ws();
            if (eat("]")) return a;
            while (true) {
                a.add(value());
                ws();
                if (eat("]")) return a;
                expect(",");
            }
        }
        if (c == '"') return string();
        if (eat("null")) return null;
        if (eat("true")) return Boolean.TRUE;
        if (eat("false")) return Boolean.FALSE;
        int start = i;
        while (i < s.length() && "+-.eE0123456789".indexOf(s.charAt(i)) >= 0) i++;
        return Double.parseDouble(s.substring(start, i));
    }

    private String string() {
        expect("\"");
        StringBuilder out = new StringBuilder();
        while (true) {
            char c = s.charAt(i++);
            if (c == '"') return out.toString();
            if (c != '\\') {
                out.append(c);
                continue;
            }
            char e = s.charAt(i++);
            switch (e) {
                case 'n' -> out.append('\n');
                case 't' -> out.append('\t');
                case 'r' -> out.append('\r');
                case 'b' -> out.append('\b');
                case 'f' -> out.append('\f');
                case 'u' -> {
                    out.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
                    i += 4;
                }
                default -> out.append(e);
            }
        }
    }
}
