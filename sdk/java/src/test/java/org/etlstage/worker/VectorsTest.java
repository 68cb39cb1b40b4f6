package org.etlstage.worker;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * Every protocol test vector in {@code sdk/vectors/*.json} (sdk/vectors/README.md), run
 * through this SDK: the same bytes in, the same bytes out, read by read.
 */
class VectorsTest {
    static final Path VECTORS = Path.of(System.getProperty("user.dir")).resolve("../vectors").normalize();

    /** Hands the SDK one chunk per read, noting how much output had arrived at each read. */
    static final class Chunks extends InputStream {
        final List<byte[]> chunks;
        final ByteArrayOutputStream out;
        final List<Integer> marks = new ArrayList<>();
        int next;

        Chunks(List<byte[]> chunks, ByteArrayOutputStream out) {
            this.chunks = chunks;
            this.out = out;
        }

        @Override
        public int read() {
            throw new AssertionError("the SDK reads byte by byte");
        }

        @Override
        public int read(byte[] b, int off, int len) {
            marks.add(out.size());
            if (next == chunks.size()) return -1;
            byte[] chunk = chunks.get(next++);
            assertTrue(chunk.length <= len, "a test chunk larger than the SDK's read");
            System.arraycopy(chunk, 0, b, off, chunk.length);
            return chunk.length;
        }
    }

    /** The handlers of sdk/vectors/README.md. */
    static final class Handler implements Extractor, Transformer, Loader {
        final String name;
        List<List<byte[]>> cycles = List.of();
        long batches;
        long messages;
        final List<List<byte[]>> loaded = new ArrayList<>();
        final List<Long> commits = new ArrayList<>();

        Handler(String name) {
            this.name = name;
        }

        @Override
        public Report report() {
            if (!name.equals("count-batch") && !name.equals("collect")) return null;
            return new Report().count("batches", batches).count("messages", messages);
        }

        @Override
        public void process(List<byte[]> ms, Output out) throws Exception {
            batches++;
            messages += ms.size();
            switch (name) {
                case "echo" -> {
                    for (byte[] m : ms) out.emit(m);
                }
                case "upper-ascii" -> {
                    for (byte[] m : ms) {
                        byte[] r = m.clone();
                        for (int i = 0; i < r.length; i++) if (r[i] >= 'a' && r[i] <= 'z') r[i] -= 32;
                        out.emit(r);
                    }
                }
                case "split-comma" -> {
                    for (byte[] m : ms) {
                        int from = 0;
                        for (int i = 0; i <= m.length; i++) {
                            if (i == m.length || m[i] == ',') {
                                out.emit(m, from, i - from);
                                from = i + 1;
                            }
                        }
                    }
                }
                case "drop" -> {}
                case "count-batch" -> out.emit(Integer.toString(ms.size()));
                default -> throw new AssertionError("no T handler " + name);
            }
        }

        @Override
        public void load(List<byte[]> ms) {
            batches++;
            messages += ms.size();
            loaded.add(ms);
        }

        @Override
        public void extract(Request request, Output out) throws Exception {
            if (name.equals("emit-range")) {
                for (long n = Long.parseLong(request.start()); n < Long.parseLong(request.end()); n++) out.emit(Long.toString(n));
                return;
            }
            int cycle = request == null ? 0 : (int) request.cycle();
            if (cycle < cycles.size()) for (byte[] m : cycles.get(cycle)) out.emit(m);
        }

        @Override
        public void onWindowDone(Request request) {
            commits.add(request.cycle() - 1);
        }
    }

    /**
     * The T handlers again on the in-place API ({@link BatchTransformer}): messages read from
     * the SDK's buffer (echo), changed in place (upper-ascii), split through ByteBuffer views
     * of it (split-comma).
     */
    static final class InPlace implements BatchTransformer {
        static final List<String> NAMES = List.of("echo", "upper-ascii", "split-comma", "drop", "count-batch");
        final String name;
        long batches;
        long messages;

        InPlace(String name) {
            this.name = name;
        }

        @Override
        public Report report() {
            if (!name.equals("count-batch")) return null;
            return new Report().count("batches", batches).count("messages", messages);
        }

        @Override
        public void process(Batch b, Output out) throws Exception {
            batches++;
            messages += b.size();
            byte[] a = b.array();
            switch (name) {
                case "echo" -> {
                    for (int i = 0; i < b.size(); i++) out.emit(a, b.offset(i), b.length(i));
                }
                case "upper-ascii" -> {
                    for (int i = 0; i < b.size(); i++) {
                        int end = b.offset(i) + b.length(i);
                        for (int j = b.offset(i); j < end; j++) if (a[j] >= 'a' && a[j] <= 'z') a[j] -= 32;
                        out.emit(a, b.offset(i), b.length(i));
                    }
                }
                case "split-comma" -> {
                    for (int i = 0; i < b.size(); i++) {
                        java.nio.ByteBuffer m = b.message(i);
                        int from = 0;
                        for (int j = 0; j <= m.limit(); j++) {
                            if (j == m.limit() || m.get(j) == ',') {
                                out.emit(m.duplicate().limit(j).position(from));
                                from = j + 1;
                            }
                        }
                    }
                }
                case "drop" -> {}
                case "count-batch" -> out.emit(Integer.toString(b.size()));
                default -> throw new AssertionError("no T handler " + name);
            }
        }
    }

    static List<byte[]> b64s(Object list) {
        List<byte[]> out = new ArrayList<>();
        for (Object s : (List<?>) list) out.add(Base64.getDecoder().decode((String) s));
        return out;
    }

    static String esc(byte[] b) {
        return Output.escape(b, 0, b.length);
    }

    @SuppressWarnings("unchecked")
    static void run(Map<String, Object> v, Path stateDir, boolean inPlace) throws IOException {
        Map<String, String> env = new HashMap<>((Map<String, String>) v.get("env"));
        if (v.get("report") != null) env.put("ETLSTAGE_STATE_DIR", stateDir.toString());
        Handler h = new Handler((String) v.get("handler"));
        Map<String, Object> args = (Map<String, Object>) v.get("args");
        if (args != null && args.get("cycles") != null) {
            h.cycles = ((List<Object>) args.get("cycles")).stream().map(VectorsTest::b64s).collect(Collectors.toList());
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        Chunks in = new Chunks(b64s(v.get("stdin")), out);
        OutputStream sink = out;
        int exit = 0;
        String why = "";
        try {
            Scenario sc = Scenario.fromEnv(env);
            switch (sc.type()) {
                case E -> Serve.extractor(h, sc, in, sink);
                case T -> {
                    if (inPlace) Serve.batchTransformer(new InPlace(h.name), sc, in, sink);
                    else Serve.transformer(h, sc, in, sink);
                }
                case L -> Serve.loader(h, sc, in, sink);
            }
        } catch (WorkerException e) {
            exit = e.exitCode();
            why = e.getMessage();
        }
        assertEquals(((Double) v.get("exit")).intValue(), exit, "exit status: " + why);
        if (exit != 0) return;
        byte[] all = out.toByteArray();
        List<Integer> marks = new ArrayList<>(in.marks);
        marks.add(all.length);
        List<byte[]> replies = b64s(v.get("replies"));
        int from = 0;
        for (int i = 0; i < replies.size(); i++) {
            int to = i < marks.size() ? marks.get(i) : all.length;
            byte[] got = java.util.Arrays.copyOfRange(all, from, to);
            assertEquals(esc(replies.get(i)), esc(got), "reply " + i);
            from = to;
        }
        assertEquals(all.length, from, "written after the last expected reply");
        if (v.get("loaded") != null) {
            List<List<byte[]>> want = ((List<Object>) v.get("loaded")).stream().map(VectorsTest::b64s).toList();
            assertEquals(want.size(), h.loaded.size(), "batches loaded");
            for (int i = 0; i < want.size(); i++) {
                assertEquals(want.get(i).size(), h.loaded.get(i).size(), "batch " + i);
                for (int j = 0; j < want.get(i).size(); j++) assertArrayEquals(want.get(i).get(j), h.loaded.get(i).get(j));
            }
        }
        if (v.get("commits") != null) {
            List<Long> want = ((List<Object>) v.get("commits")).stream().map(c -> ((Double) c).longValue()).toList();
            assertEquals(want, h.commits, "commits");
        }
        List<Path> reports;
        try (Stream<Path> files = Files.list(stateDir)) {
            reports = files.toList();
        }
        if (v.get("report") == null) {
            assertEquals(List.of(), reports, "no report may be written");
        } else {
            assertEquals(1, reports.size(), "report files " + reports);
            assertEquals("report-" + env.get("ETLSTAGE_INSTANCE") + "-" + ProcessHandle.current().pid() + ".json",
                    reports.get(0).getFileName().toString());
            Object got = Json.parse(Files.readString(reports.get(0), StandardCharsets.UTF_8));
            assertEquals(v.get("report"), got, "report");
        }
    }

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> vectors() throws IOException {
        List<Map<String, Object>> all = new ArrayList<>();
        try (Stream<Path> files = Files.list(VECTORS)) {
            for (Path f : files.filter(p -> p.toString().endsWith(".json")).sorted(Comparator.naturalOrder()).toList()) {
                all.addAll((List<Map<String, Object>>) Json.parse(Files.readString(f, StandardCharsets.UTF_8)));
            }
        }
        return all;
    }

    static DynamicTest test(String name, Map<String, Object> v, boolean inPlace) {
        return DynamicTest.dynamicTest(name, () -> {
            Path dir = Files.createTempDirectory("etlstage-java-vectors");
            try {
                run(v, dir, inPlace);
            } finally {
                try (Stream<Path> files = Files.walk(dir)) {
                    for (Path p : files.sorted(Comparator.reverseOrder()).toList()) Files.delete(p);
                }
            }
        });
    }

    @TestFactory
    Stream<DynamicTest> everyVectorGivesTheSameBytesOut() throws IOException {
        return vectors().stream().map(v -> test((String) v.get("name"), v, false));
    }

    /** Every vector of a T handler again, the worker on the in-place API. */
    @TestFactory
    Stream<DynamicTest> everyTransformerVectorInPlaceToo() throws IOException {
        return inPlaceVectors().stream().map(v -> test("in place: " + v.get("name"), v, true));
    }

    static List<Map<String, Object>> inPlaceVectors() throws IOException {
        return vectors().stream().filter(v -> InPlace.NAMES.contains((String) v.get("handler"))).toList();
    }

    @Test
    void theVectorsAreThere() throws IOException {
        assertTrue(vectors().size() >= 40, "sdk/vectors holds " + vectors().size() + " vectors");
        assertTrue(inPlaceVectors().size() >= 15, inPlaceVectors().size() + " vectors of T handlers");
    }
}
