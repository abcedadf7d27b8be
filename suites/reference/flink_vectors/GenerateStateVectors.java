// Drives Flink's own state classes on random operation sequences and prints what they return, as JSON
// lines on stdout (see regenerate.sh): the heap keyed backend (HeapKeyedStateBackend from its builder,
// Flink's TTL decorators on a controllable TtlTimeProvider) for Value, List, Map, Reducing and
// Aggregating state, with and without TTL, incl. namespace merges; and
// RoundRobinOperatorStateRepartitioner for split, union and broadcast operator state.
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.time.Duration;
import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.state.*;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.api.common.typeutils.base.LongSerializer;
import org.apache.flink.api.common.typeutils.base.StringSerializer;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.runtime.checkpoint.RoundRobinOperatorStateRepartitioner;
import org.apache.flink.runtime.state.*;
import org.apache.flink.runtime.state.heap.HeapKeyedStateBackend;
import org.apache.flink.runtime.state.heap.HeapKeyedStateBackendBuilder;
import org.apache.flink.runtime.state.heap.HeapPriorityQueueSetFactory;
import org.apache.flink.runtime.state.internal.InternalKvState;
import org.apache.flink.runtime.state.internal.InternalMergingState;
import org.apache.flink.runtime.state.memory.ByteStreamStateHandle;
import org.apache.flink.runtime.state.metrics.LatencyTrackingStateConfig;
import org.apache.flink.runtime.state.metrics.SizeTrackingStateConfig;

public class GenerateStateVectors {
    static long now = 0;
    static final long MOD = 1000003L;
    static final String[] NS = {"n0", "n1", "n2"};

    static class Agg implements AggregateFunction<Long, Long, String> {
        public Long createAccumulator() { return 1L; }
        public Long add(Long v, Long acc) { return (acc * 5 + v) % MOD; }
        public String getResult(Long acc) { return "r" + acc; }
        public Long merge(Long a, Long b) { return (a * 7 + b) % MOD; }
    }

    static String j(Object o) {
        if (o == null) return "null";
        if (o instanceof String) return "\"" + o + "\"";
        if (o instanceof Boolean || o instanceof Number) return o.toString();
        if (o instanceof Iterable) {
            StringBuilder b = new StringBuilder("[");
            boolean first = true;
            for (Object x : (Iterable<?>) o) { if (!first) b.append(','); first = false; b.append(j(x)); }
            return b.append(']').toString();
        }
        if (o instanceof Map.Entry) { Map.Entry<?, ?> e = (Map.Entry<?, ?>) o; return "[" + j(e.getKey()) + "," + j(e.getValue()) + "]"; }
        throw new IllegalArgumentException(o.getClass().toString());
    }

    static HeapKeyedStateBackend<Integer> backend() throws Exception {
        KeyGroupRange range = new KeyGroupRange(0, 127);
        return new HeapKeyedStateBackendBuilder<Integer>(
                null, IntSerializer.INSTANCE, GenerateStateVectors.class.getClassLoader(), 128, range,
                new ExecutionConfig(), () -> now, LatencyTrackingStateConfig.disabled(),
                SizeTrackingStateConfig.disabled(), Collections.emptyList(),
                UncompressedStreamCompressionDecorator.INSTANCE, new LocalRecoveryConfig(false, false, null),
                new HeapPriorityQueueSetFactory(range, 128, 128), true, new CloseableRegistry()).build();
    }

    static Integer rv(Random r) { return r.nextInt(100); }

    static List<Integer> rlist(Random r) {
        List<Integer> l = new ArrayList<>();
        int n = r.nextInt(4);
        for (int i = 0; i < n; i++) l.add(rv(r));
        return l;
    }

    static List<Object> sortedEntries(Iterable<? extends Map.Entry<Integer, Integer>> it) {
        List<Map.Entry<Integer, Integer>> l = new ArrayList<>();
        for (Map.Entry<Integer, Integer> e : it) l.add(new java.util.AbstractMap.SimpleEntry<>(e.getKey(), e.getValue()));
        l.sort((a, b) -> Integer.compare(a.getKey(), b.getKey()));
        return new ArrayList<>(l);
    }

    static <T extends Comparable<T>> List<T> sorted(Iterable<T> it) {
        List<T> l = new ArrayList<>();
        for (T x : it) l.add(x);
        Collections.sort(l, (a, b) -> a == null ? (b == null ? 0 : -1) : b == null ? 1 : a.compareTo(b));
        return l;
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static String keyedSequence(Random r, String kind, StateTtlConfig ttl, long ttlMs, String ttlJson, int nOps) throws Exception {
        now = r.nextInt(3) == 0 ? 0 : r.nextInt(1000);
        HeapKeyedStateBackend<Integer> b = backend();
        boolean withDefault = kind.equals("value") && r.nextBoolean();  // TTL value state ignores it
        StateDescriptor d;
        switch (kind) {
            case "value": d = withDefault ? new ValueStateDescriptor<>("s", IntSerializer.INSTANCE, -1) : new ValueStateDescriptor<>("s", IntSerializer.INSTANCE); break;
            case "list": d = new ListStateDescriptor<>("s", IntSerializer.INSTANCE); break;
            case "map": d = new MapStateDescriptor<>("s", IntSerializer.INSTANCE, IntSerializer.INSTANCE); break;
            case "reducing": d = new ReducingStateDescriptor<>("s", (Long x, Long y) -> (x * 3 + y) % MOD, LongSerializer.INSTANCE); break;
            default: d = new AggregatingStateDescriptor<>("s", new Agg(), LongSerializer.INSTANCE);
        }
        if (ttl != null) d.enableTimeToLive(ttl);
        InternalKvState s = (InternalKvState) b.getOrCreateKeyedState(StringSerializer.INSTANCE, d);
        boolean merging = kind.equals("list") || kind.equals("reducing") || kind.equals("aggregating");
        StringBuilder ops = new StringBuilder("[");
        ops.append("[\"time\",").append(now).append(']');
        int key = r.nextInt(3);
        String ns = NS[r.nextInt(3)];
        b.setCurrentKey(key);
        s.setCurrentNamespace(ns);
        ops.append(",[\"key\",").append(key).append("],[\"ns\",\"").append(ns).append("\"]");
        for (int i = 0; i < nOps; i++) {
            String op;
            int p = r.nextInt(100);
            if (p < 14) {
                long step = r.nextInt(4) == 0 ? ttlMs : r.nextInt((int) ttlMs + 2);
                now += step;
                op = "[\"time\"," + now + "]";
            } else if (p < 20) {
                key = r.nextInt(3); b.setCurrentKey(key); op = "[\"key\"," + key + "]";
            } else if (p < 26) {
                ns = NS[r.nextInt(3)]; s.setCurrentNamespace(ns); op = "[\"ns\",\"" + ns + "\"]";
            } else if (p < 30) {
                s.clear(); op = "[\"clear\"]";
            } else if (merging && p < 36) {
                String target = NS[r.nextInt(3)];
                List<String> sources = new ArrayList<>();
                int n = r.nextInt(4);
                for (int k = 0; k < n; k++) sources.add(NS[r.nextInt(3)]);
                ((InternalMergingState) s).mergeNamespaces(target, sources);
                op = "[\"merge\"," + j(target) + "," + j(sources) + "]";
            } else {
                boolean read = r.nextBoolean();
                switch (kind) {
                    case "value": {
                        ValueState<Integer> v = (ValueState<Integer>) s;
                        if (read) op = "[\"value\"," + j(v.value()) + "]";
                        else { Integer x = r.nextInt(8) == 0 ? null : rv(r); v.update(x); op = "[\"update\"," + j(x) + "]"; }
                        break;
                    }
                    case "list": {
                        ListState<Integer> l = (ListState<Integer>) s;
                        if (read) {
                            Iterable<Integer> got = l.get();
                            List<Integer> out = new ArrayList<>();
                            if (got != null) for (Integer x : got) out.add(x);
                            op = "[\"get\"," + (out.isEmpty() ? "null" : j(out)) + "]";
                        } else {
                            int w = r.nextInt(4);
                            if (w < 2) { Integer x = rv(r); l.add(x); op = "[\"add\"," + x + "]"; }
                            else if (w == 2) { List<Integer> x = rlist(r); l.addAll(x); op = "[\"add_all\"," + j(x) + "]"; }
                            else { List<Integer> x = rlist(r); l.update(x); op = "[\"update\"," + j(x) + "]"; }
                        }
                        break;
                    }
                    case "map": {
                        MapState<Integer, Integer> m = (MapState<Integer, Integer>) s;
                        int uk = r.nextInt(5);
                        if (read) {
                            switch (r.nextInt(6)) {
                                case 0: op = "[\"get\"," + uk + "," + j(m.get(uk)) + "]"; break;
                                case 1: op = "[\"contains\"," + uk + "," + m.contains(uk) + "]"; break;
                                case 2: op = "[\"items\"," + j(sortedEntries(m.entries())) + "]"; break;
                                case 3: op = "[\"keys\"," + j(sorted(m.keys())) + "]"; break;
                                case 4: op = "[\"values\"," + j(sorted(m.values())) + "]"; break;
                                default: op = "[\"is_empty\"," + m.isEmpty() + "]";
                            }
                        } else {
                            int w = r.nextInt(4);
                            if (w < 2) { Integer x = r.nextInt(8) == 0 ? null : rv(r); m.put(uk, x); op = "[\"put\"," + uk + "," + j(x) + "]"; }
                            else if (w == 2) {
                                Map<Integer, Integer> x = new HashMap<>();
                                List<Object> pairs = new ArrayList<>();
                                for (int k = r.nextInt(3); k >= 0; k--) { int kk = r.nextInt(5); int vv = rv(r); if (x.put(kk, vv) != null) pairs.removeIf(e -> ((Map.Entry<?, ?>) e).getKey().equals(kk)); pairs.add(new java.util.AbstractMap.SimpleEntry<>(kk, vv)); }
                                m.putAll(x);
                                op = "[\"put_all\"," + j(pairs) + "]";
                            } else { m.remove(uk); op = "[\"remove\"," + uk + "]"; }
                        }
                        break;
                    }
                    case "reducing": {
                        ReducingState<Long> rs = (ReducingState<Long>) s;
                        if (read) op = "[\"get\"," + j(rs.get()) + "]";
                        else { long x = rv(r); rs.add(x); op = "[\"add\"," + x + "]"; }
                        break;
                    }
                    default: {
                        AggregatingState<Long, String> as = (AggregatingState<Long, String>) s;
                        if (read) op = "[\"get\"," + j(as.get()) + "]";
                        else { long x = rv(r); as.add(x); op = "[\"add\"," + x + "]"; }
                    }
                }
            }
            ops.append(',').append(op);
        }
        b.dispose();
        return "{\"kind\":\"keyed\",\"state\":\"" + kind + "\",\"default\":" + (withDefault ? "-1" : "null")
                + ",\"ttl\":" + ttlJson + ",\"ops\":" + ops.append(']') + "}";
    }

    static final OperatorStateHandle.Mode[] MODES = {
        OperatorStateHandle.Mode.SPLIT_DISTRIBUTE, OperatorStateHandle.Mode.UNION, OperatorStateHandle.Mode.BROADCAST};

    static String randomName(Random r) {
        StringBuilder b = new StringBuilder();
        int len = 1 + r.nextInt(8);
        for (int i = 0; i < len; i++) b.append((char) ('a' + r.nextInt(26)));
        return b.toString();
    }

    // one case: old_p subtasks reporting some named states (elements encoded in offsets), new_p
    static String operatorCase(Random r, int oldP, int newP, int minNames) {
        return operatorCase(r, oldP, newP, minNames, -1, 10);
    }

    // modeDice 10: modes drawn as split 6, union 2, broadcast 2 in 10; above 10: broadcast only.
    // reportP: each state's chance to be reported by a subtask (negative: 0.6 or 1.0 at random)
    static String operatorCase(Random r, int oldP, int newP, int minNames, double reportP, int modeDice) {
        int nNames = minNames + r.nextInt(r.nextInt(4) == 0 ? 16 : 5);
        List<String> names = new ArrayList<>();
        List<OperatorStateHandle.Mode> modes = new ArrayList<>();
        while (names.size() < nNames) {
            String n = randomName(r);
            if (names.contains(n)) continue;
            names.add(n);
            int m = modeDice > 10 ? 8 : r.nextInt(modeDice);
            modes.add(m < 6 ? MODES[0] : m < 8 ? MODES[1] : MODES[2]);
        }
        if (reportP < 0) reportP = r.nextInt(3) == 0 ? 0.6 : 1.0;
        List<List<OperatorStateHandle>> prev = new ArrayList<>();
        StringBuilder old = new StringBuilder("[");
        for (int i = 0; i < oldP; i++) {
            // insertion-ordered: the vector lists each subtask's states in its handle's iteration order
            Map<String, OperatorStateHandle.StateMetaInfo> meta = new java.util.LinkedHashMap<>();
            StringBuilder sub = new StringBuilder("[");
            List<Integer> order = new ArrayList<>();
            for (int k = 0; k < names.size(); k++) order.add(k);
            Collections.shuffle(order, r);
            for (int k : order) {
                if (r.nextDouble() >= reportP) continue;
                int n = modes.get(k) == MODES[2] ? 1 + r.nextInt(3) : r.nextInt(r.nextInt(3) == 0 ? 12 : 4);
                long[] offs = new long[n];
                for (int e = 0; e < n; e++) offs[e] = i * 1_000_000L + k * 1000L + e;
                meta.put(names.get(k), new OperatorStateHandle.StateMetaInfo(offs, modes.get(k)));
                if (sub.length() > 1) sub.append(',');
                sub.append("[\"").append(names.get(k)).append("\",\"").append(modes.get(k)).append("\",").append(n).append(']');
            }
            prev.add(meta.isEmpty() ? new ArrayList<>()
                    : new ArrayList<>(List.of(new OperatorStreamStateHandle(meta, new ByteStreamStateHandle("sub" + i, new byte[] {(byte) i})))));
            if (i > 0) old.append(',');
            old.append(sub.append(']'));
        }
        old.append(']');
        List<List<OperatorStateHandle>> out = RoundRobinOperatorStateRepartitioner.INSTANCE.repartitionState(prev, oldP, newP);
        StringBuilder res = new StringBuilder("[");
        for (int i = 0; i < newP; i++) {
            // per name, the (old subtask, element) pairs dealt to subtask i, sorted: the order of a
            // subtask's handles is a HashMap's
            Map<String, List<Long>> got = new java.util.TreeMap<>();
            for (OperatorStateHandle h : out.get(i)) {
                for (Map.Entry<String, OperatorStateHandle.StateMetaInfo> e : h.getStateNameToPartitionOffsets().entrySet()) {
                    List<Long> l = got.computeIfAbsent(e.getKey(), x -> new ArrayList<>());
                    for (long o : e.getValue().getOffsets()) l.add(o);
                }
            }
            if (i > 0) res.append(',');
            res.append('{');
            boolean first = true;
            for (Map.Entry<String, List<Long>> e : got.entrySet()) {
                if (!first) res.append(',');
                first = false;
                List<Long> offs = e.getValue();
                Collections.sort(offs);
                List<String> pairs = new ArrayList<>();
                for (long o : offs) pairs.add("[" + (o / 1_000_000L) + "," + (o % 1000L) + "]");
                res.append('"').append(e.getKey()).append("\":[").append(String.join(",", pairs)).append(']');
            }
            res.append('}');
        }
        return "{\"kind\":\"operator\",\"old_p\":" + oldP + ",\"new_p\":" + newP + ",\"old\":" + old + ",\"new\":" + res.append(']') + "}";
    }

    public static void main(String[] args) throws Exception {
        Random r = new Random(20261123L);
        String[] kinds = {"value", "list", "map", "reducing", "aggregating"};
        long[] ttls = {1, 3, 5, 10};
        for (String kind : kinds) {
            for (int c = 0; c < 60; c++) {
                StateTtlConfig ttl = null;
                String ttlJson = "null";
                long ttlMs = 5;
                if (c % 6 != 5) {
                    ttlMs = ttls[r.nextInt(ttls.length)];
                    boolean onRead = r.nextBoolean();
                    boolean returnExpired = (c & 1) == 0;
                    boolean incremental = !returnExpired && r.nextBoolean();
                    StateTtlConfig.Builder tb = StateTtlConfig.newBuilder(Duration.ofMillis(ttlMs))
                            .setUpdateType(onRead ? StateTtlConfig.UpdateType.OnReadAndWrite : StateTtlConfig.UpdateType.OnCreateAndWrite)
                            .setStateVisibility(returnExpired ? StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp : StateTtlConfig.StateVisibility.NeverReturnExpired)
                            .disableCleanupInBackground();
                    if (incremental) tb = tb.cleanupIncrementally(5, false);
                    ttl = tb.build();
                    ttlJson = "{\"ttl_ms\":" + ttlMs + ",\"update_type\":\"" + (onRead ? "OnReadAndWrite" : "OnCreateAndWrite")
                            + "\",\"state_visibility\":\"" + (returnExpired ? "ReturnExpiredIfNotCleanedUp" : "NeverReturnExpired")
                            + "\",\"incremental_cleanup\":" + incremental + "}";
                }
                System.out.println(keyedSequence(r, kind, ttl, ttlMs, ttlJson, 40 + r.nextInt(40)));
            }
        }
        int[] ps = {1, 2, 3, 4, 5, 7, 8, 10, 13};
        for (int oldP : ps) for (int newP : ps) for (int c = 0; c < 3; c++) System.out.println(operatorCase(r, oldP, newP, 1));
        // many named states: Flink's HashMap of names resizes (past 12 names, then 24)
        for (int c = 0; c < 40; c++) System.out.println(operatorCase(r, 1 + r.nextInt(6), 1 + r.nextInt(9), 14 + r.nextInt(20)));
        // broadcast states that only some subtasks report, at the same parallelism: Flink 2.3.0's
        // StateEntry.isPartiallyReported (0 < cardinality() < parallelism, FLINK-38131) then deals
        // copies round robin on top of each subtask's own handle; when all report, each keeps its own
        for (int p : new int[] {2, 3, 4, 5, 7, 8}) for (int c = 0; c < 4; c++) System.out.println(operatorCase(r, p, p, 1, 0.5, 11));
    }
}
