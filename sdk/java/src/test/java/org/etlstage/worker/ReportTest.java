package org.etlstage.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/** A report's JSON: numbers, named numbers, and the one text key, "output". */
class ReportTest {
    @Test
    void numbersAndOneLevelOfNamedNumbers() {
        Report r = new Report().count("valid", 12).named("invalid", "GEN\"1", 2).named("invalid", "B", 0.5);
        assertEquals("{\"valid\": 12, \"invalid\": {\"GEN\\\"1\": 2, \"B\": 0.5}}", r.toJson());
    }

    @Test
    void theOutputIsTextAndSetOnce() {
        Report r = new Report().output("old").count("loaded", 3).output("out/\"b\"");
        assertEquals("{\"loaded\": 3, \"output\": \"out/\\\"b\\\"\"}", r.toJson());
    }
}
