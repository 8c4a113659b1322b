// The JSON-lines loop shared by lockstorm's Java lock adapters.
//
// The protocol is docs/protocol.md in the lockstorm repository. An adapter
// extends Protocol.Adapter and calls Protocol.serve(adapter). Requests are
// flat JSON objects; the few values they hold (strings, numbers, booleans,
// null, lists of strings) are all this reader knows, so no JSON library is
// needed on the classpath.

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

public final class Protocol {
    private Protocol() {}

    /** A lock library behind the protocol. */
    public abstract static class Adapter {
        /** The library and its version, and the features it declares. */
        public abstract String[] init(Map<String, Object> req) throws Exception;

        /** The library settings chosen over its defaults, for run.json. */
        public Map<String, Object> options() {
            return new LinkedHashMap<>();
        }

        /** True when the lock was taken within the wait, false when busy. */
        public abstract boolean acquire(long timeoutMs) throws Exception;

        /** The grant's fencing token, for a "fence" adapter; null if none. */
        public Long fence() throws Exception {
            return null;
        }

        public abstract boolean check() throws Exception;

        /** False when the lock was not (or no longer) ours. */
        public abstract boolean release() throws Exception;
    }

    public static void serve(Adapter adapter) throws Exception {
        // Replies go to the real stdout alone; anything else a library prints
        // goes to stderr, so it cannot corrupt the protocol.
        PrintStream replies = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
        System.setOut(System.err);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        List<String> features = null;
        boolean held = false;
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            Map<String, Object> reply = new LinkedHashMap<>();
            Object id = null;
            try {
                Map<String, Object> req = new Reader(line).object();
                id = req.get("id");
                String op = String.valueOf(req.get("op"));
                if (op.equals("init")) {
                    try {
                        String[] said = adapter.init(req);
                        features = List.of(said).subList(1, said.length);
                        reply.put("ok", true);
                        reply.put("client", said[0]);
                        reply.put("features", features);
                        reply.put("options", adapter.options());
                    } catch (Exception e) {
                        e.printStackTrace();
                        reply.put("ok", false);
                        reply.put("error", "init: " + describe(e));
                    }
                } else if (features == null) {
                    reply.put("ok", false);
                    reply.put("error", "error: not initialised");
                } else if (op.equals("acquire")) {
                    long timeout = ((Number) req.getOrDefault("timeout_ms", 4000L)).longValue();
                    held = adapter.acquire(timeout);
                    reply.put("ok", held);
                    if (!held) {
                        reply.put("error", "lock-busy");
                    } else if (features.contains("fence")) {
                        reply.put("fence", adapter.fence());
                    }
                } else if (op.equals("check") && features.contains("check")) {
                    reply.put("ok", true);
                    reply.put("valid", held && adapter.check());
                } else if (op.equals("release")) {
                    boolean ours = held;
                    held = false; // whatever the outcome, it is no longer ours
                    boolean released = ours && adapter.release();
                    reply.put("ok", released);
                    if (!released) {
                        reply.put("error", "not-held");
                    }
                } else {
                    reply.put("ok", false);
                    reply.put("error", "unsupported: " + op);
                }
            } catch (Exception e) {
                // An exception means we cannot tell what happened: "info".
                e.printStackTrace();
                reply.clear();
                reply.put("ok", null);
                reply.put("error", describe(e));
            }
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("id", id);
            out.putAll(reply);
            replies.println(write(out));
            if (replies.checkError()) {
                System.exit(1); // the worker is gone
            }
        }
        // stdin closed: leave now; library threads must not keep us alive.
        System.exit(0);
    }

    static String describe(Exception e) {
        String said = e.getClass().getSimpleName() + ": " + e.getMessage();
        return ("error: " + said).substring(0, Math.min(500, said.length() + 7));
    }

    /** One JSON value, written compactly. */
    static String write(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof Boolean || v instanceof Number) {
            return v.toString();
        }
        if (v instanceof Map<?, ?> map) {
            List<String> fields = new ArrayList<>();
            for (Map.Entry<?, ?> e : map.entrySet()) {
                fields.add(write(String.valueOf(e.getKey())) + ":" + write(e.getValue()));
            }
            return "{" + String.join(",", fields) + "}";
        }
        if (v instanceof List<?> list) {
            List<String> items = new ArrayList<>();
            for (Object item : list) {
                items.add(write(item));
            }
            return "[" + String.join(",", items) + "]";
        }
        StringBuilder s = new StringBuilder("\"");
        for (char c : v.toString().toCharArray()) {
            if (c == '"' || c == '\\') {
                s.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                s.append(String.format("\\u%04x", (int) c));
            } else {
                s.append(c);
            }
        }
        return s.append('"').toString();
    }

    /** A reader of the JSON a request line holds. */
    static final class Reader {
        private final String text;
        private int at;

        Reader(String text) {
            this.text = text;
        }

        Map<String, Object> object() {
            Object v = value();
            skip();
            if (!(v instanceof Map) || at != text.length()) {
                throw new IllegalArgumentException("request is not a JSON object");
            }
            @SuppressWarnings("unchecked")
            Map<String, Object> map = (Map<String, Object>) v;
            return map;
        }

        private void skip() {
            while (at < text.length() && Character.isWhitespace(text.charAt(at))) {
                at++;
            }
        }

        private char next() {
            skip();
            if (at >= text.length()) {
                throw new IllegalArgumentException("the line ends inside a value");
            }
            return text.charAt(at);
        }

        private void expect(char c) {
            if (next() != c) {
                throw new IllegalArgumentException("expected '" + c + "' at " + at);
            }
            at++;
        }

        private Object value() {
            char c = next();
            if (c == '{') {
                Map<String, Object> map = new LinkedHashMap<>();
                at++;
                if (next() == '}') {
                    at++;
                    return map;
                }
                do {
                    String key = string();
                    expect(':');
                    map.put(key, value());
                } while (comma());
                expect('}');
                return map;
            }
            if (c == '[') {
                List<Object> list = new ArrayList<>();
                at++;
                if (next() == ']') {
                    at++;
                    return list;
                }
                do {
                    list.add(value());
                } while (comma());
                expect(']');
                return list;
            }
            if (c == '"') {
                return string();
            }
            for (String word : new String[] {"true", "false", "null"}) {
                if (text.startsWith(word, at)) {
                    at += word.length();
                    return word.equals("null") ? null : Boolean.valueOf(word);
                }
            }
            int start = at;
            while (at < text.length() && "+-.eE0123456789".indexOf(text.charAt(at)) >= 0) {
                at++;
            }
            String number = text.substring(start, at);
            if (number.isEmpty()) {
                throw new IllegalArgumentException("no JSON value at " + start);
            }
            return number.matches("-?\\d+") ? (Object) Long.valueOf(number) : (Object) Double.valueOf(number);
        }

        private boolean comma() {
            if (next() == ',') {
                at++;
                return true;
            }
            return false;
        }

        private String string() {
            expect('"');
            StringBuilder s = new StringBuilder();
            while (true) {
                if (at >= text.length()) {
                    throw new IllegalArgumentException("a string does not end");
                }
                char c = text.charAt(at++);
                if (c == '"') {
                    return s.toString();
                }
                if (c != '\\') {
                    s.append(c);
                    continue;
                }
                char e = text.charAt(at++);
                switch (e) {
                    case 'n' -> s.append('\n');
                    case 't' -> s.append('\t');
                    case 'r' -> s.append('\r');
                    case 'b' -> s.append('\b');
                    case 'f' -> s.append('\f');
                    case 'u' -> {
                        s.append((char) Integer.parseInt(text.substring(at, at + 4), 16));
                        at += 4;
                    }
                    default -> s.append(e);
                }
            }
        }
    }
}
