package org.etlstage.worker;

import java.util.Map;

/** Everything a worker learns from its environment ({@code ETLSTAGE_*}). */
public record Scenario(
        StageType type,
        Mode mode,
        int batchSize,
        boolean workerDriven,
        boolean workerOffsets,
        Markers markers,
        String stage,
        int instance,
        int instances,
        String stateDir,
        boolean batchId) { // L batches open with their id (ETLSTAGE_BATCH_ID=1; docs/protocol.md: batch ids)

    public enum StageType { E, T, L }

    public enum Mode { PLAIN, CYCLIC, SINGLE, BATCH }

    /** The scenario of this process. */
    public static Scenario fromEnv() throws WorkerException {
        return fromEnv(System.getenv());
    }

    /** The scenario from a map of variables (names other than {@code ETLSTAGE_*} are ignored). */
    public static Scenario fromEnv(Map<String, String> env) throws WorkerException {
        StageType type = switch (get(env, "TYPE", "T")) {
            case "E" -> StageType.E;
            case "T" -> StageType.T;
            case "L" -> StageType.L;
            default -> throw bad(env, "TYPE", "one of E, T, L");
        };
        String mode = get(env, "MODE", type == StageType.E ? "plain" : "single");
        Mode m;
        if (type == StageType.E) {
            m = switch (mode) {
                case "plain" -> Mode.PLAIN;
                case "cyclic" -> Mode.CYCLIC;
                default -> throw bad(env, "MODE", "one of plain, cyclic for an E-stage");
            };
        } else {
            m = switch (mode) {
                case "single" -> Mode.SINGLE;
                case "batch" -> Mode.BATCH;
                default -> throw bad(env, "MODE", "one of single, batch for a T- or L-stage");
            };
        }
        int batchSize = number(env, "BATCH_SIZE", "1", 1);
        int instance = number(env, "INSTANCE", "0", 0);
        int instances = number(env, "INSTANCES", "1", 1);
        boolean workerDriven = switch (get(env, "BATCH_DRIVER", "supervisor")) {
            case "supervisor" -> false;
            case "worker" -> true;
            default -> throw bad(env, "BATCH_DRIVER", "one of supervisor, worker");
        };
        boolean workerOffsets = switch (get(env, "OFFSETS", "worker")) {
            case "worker" -> true;
            case "supervisor" -> false;
            default -> throw bad(env, "OFFSETS", "one of worker, supervisor");
        };
        byte[] mk = {
            marker(env, "EOM", Markers.DEFAULT.eom()),
            marker(env, "EOP", Markers.DEFAULT.eop()),
            marker(env, "EOB", Markers.DEFAULT.eob()),
            marker(env, "BNC", Markers.DEFAULT.bnc()),
        };
        for (int i = 0; i < 4; i++) {
            for (int j = i + 1; j < 4; j++) {
                if (mk[i] == mk[j]) {
                    throw WorkerException.config(String.format(
                            "markers eom=0x%02x eop=0x%02x eob=0x%02x bnc=0x%02x: the four must differ",
                            mk[0], mk[1], mk[2], mk[3]));
                }
            }
        }
        return new Scenario(type, m, batchSize, m == Mode.BATCH && workerDriven, workerOffsets,
                new Markers(mk[0], mk[1], mk[2], mk[3]), get(env, "STAGE", "stage"), instance, instances,
                get(env, "STATE_DIR", ""), get(env, "BATCH_ID", "0").equals("1"));
    }

    private static String get(Map<String, String> env, String name, String fallback) {
        String v = env.get("ETLSTAGE_".concat(name)); // not +: that bootstraps StringConcatFactory at start-up
        return v == null || v.isEmpty() ? fallback : v;
    }

    private static WorkerException bad(Map<String, String> env, String name, String want) {
        return WorkerException.config("ETLSTAGE_" + name + "=\"" + get(env, name, "") + "\": expected " + want);
    }

    private static int number(Map<String, String> env, String name, String fallback, int least)
            throws WorkerException {
        try {
            int n = Integer.parseInt(get(env, name, fallback));
            if (n >= least) return n;
        } catch (NumberFormatException e) {
            // said below
        }
        throw bad(env, name, "an integer >= " + least);
    }

    private static byte marker(Map<String, String> env, String name, byte fallback) throws WorkerException {
        String v = env.get("ETLSTAGE_".concat(name));
        if (v == null || v.isEmpty()) return fallback;
        if (v.length() > 2) throw bad(env, name, "two hex digits such as 0a");
        try {
            return (byte) Integer.parseInt(v, 16);
        } catch (NumberFormatException e) {
            throw bad(env, name, "two hex digits such as 0a");
        }
    }
}
