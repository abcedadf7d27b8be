// Emits key -> hashCode -> murmurHash -> key group -> operator index vectors computed by Flink's own
// code (KeyGroupRangeAssignment, MathUtils), as JSON lines on stdout. See regenerate.sh.
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.util.MathUtils;

public class GenerateKeyGroupVectors {
    static final int[] MAX_PS = {1, 2, 7, 10, 128, 129, 1000, 4096, 32768};
    static final int[] PS = {1, 2, 3, 4, 5, 8, 15, 77};

    static String units(String s) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < s.length(); i++) { if (i > 0) b.append(','); b.append((int) s.charAt(i)); }
        return b.append(']').toString();
    }

    static String enc(Object k) {
        if (k == null) return "{\"t\":\"null\"}";
        if (k instanceof String) return "{\"t\":\"str\",\"u\":" + units((String) k) + "}";
        if (k instanceof Integer) return "{\"t\":\"int\",\"v\":\"" + k + "\"}";
        if (k instanceof Long) return "{\"t\":\"long\",\"v\":\"" + k + "\"}";
        if (k instanceof Boolean) return "{\"t\":\"bool\",\"v\":" + k + "}";
        if (k instanceof Double) return "{\"t\":\"double\",\"bits\":\"" + Double.doubleToRawLongBits((Double) k) + "\"}";
        if (k instanceof Tuple2) { Tuple2<?, ?> t = (Tuple2<?, ?>) k; return "{\"t\":\"tuple\",\"f\":[" + enc(t.f0) + "," + enc(t.f1) + "]}"; }
        if (k instanceof Tuple3) { Tuple3<?, ?, ?> t = (Tuple3<?, ?, ?>) k; return "{\"t\":\"tuple\",\"f\":[" + enc(t.f0) + "," + enc(t.f1) + "," + enc(t.f2) + "]}"; }
        throw new IllegalArgumentException(k.getClass().toString());
    }

    static String randomString(Random r) {
        int len = r.nextInt(12);
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < len; i++) {
            switch (r.nextInt(5)) {
                case 0: b.append((char) (32 + r.nextInt(95))); break;                 // ASCII
                case 1: b.append((char) (0xC0 + r.nextInt(0x180))); break;            // accented Latin
                case 2: b.append((char) (0x4E00 + r.nextInt(0x5000))); break;         // CJK
                case 3: b.appendCodePoint(0x1F300 + r.nextInt(0x300)); break;         // emoji (non-BMP)
                default: b.appendCodePoint(0x10000 + r.nextInt(0xFFFFF)); break;      // any supplementary
            }
        }
        return b.toString();
    }

    public static void main(String[] args) {
        Random r = new Random(20261122L);
        List<Object> keys = new ArrayList<>();
        String[] fixed = {"", "A", "B", "1", "3", "4", "5", "6", "7", "8", "9", "13", "25", "zürich", "𝄞", "naïve café", "日本語", "🎉🎊"};
        for (String s : fixed) keys.add(s);
        StringBuilder longS = new StringBuilder();
        for (int i = 0; i < 300; i++) longS.append((char) ('a' + i % 26));
        keys.add(longS.toString());
        for (int i = 0; i < 1500; i++) keys.add(randomString(r));
        int[] ints = {0, 1, -1, 7, 10, 45, 90, Integer.MAX_VALUE, Integer.MIN_VALUE, -2089875627};
        for (int v : ints) keys.add(v);
        for (int i = 0; i < 1500; i++) keys.add(r.nextInt());
        long[] longs = {Integer.MAX_VALUE + 1L, Integer.MIN_VALUE - 1L, Long.MAX_VALUE, Long.MIN_VALUE, 1L << 40, -(1L << 50)};
        for (long v : longs) keys.add(v);
        for (int i = 0; i < 500; i++) { long v = r.nextLong(); if (v >= Integer.MIN_VALUE && v <= Integer.MAX_VALUE) v += 1L << 33; keys.add(v); }
        keys.add(true); keys.add(false);
        double[] ds = {0.0, -0.0, 1.5, -2.25, Double.NaN, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY, Double.MIN_VALUE, Double.MAX_VALUE, 1e300};
        for (double d : ds) keys.add(d);
        for (int i = 0; i < 200; i++) keys.add(r.nextGaussian() * 1e6);
        for (int i = 0; i < 300; i++) keys.add(Tuple2.of(randomString(r), r.nextInt()));
        for (int i = 0; i < 100; i++) keys.add(new Tuple3<Object, Object, Object>(r.nextBoolean() ? null : randomString(r), r.nextLong(), r.nextBoolean() ? null : r.nextInt(1000)));

        for (Object k : keys) {
            int h = k.hashCode();
            StringBuilder b = new StringBuilder("{\"kind\":\"key\",\"key\":").append(enc(k))
                .append(",\"hash\":").append(h).append(",\"murmur\":").append(MathUtils.murmurHash(h)).append(",\"kg\":{");
            boolean first = true;
            for (int maxP : MAX_PS) {
                if (!first) b.append(','); first = false;
                b.append('"').append(maxP).append("\":[").append(KeyGroupRangeAssignment.assignToKeyGroup(k, maxP)).append(",[");
                boolean f2 = true;
                for (int p : PS) {
                    if (p > maxP) continue;
                    if (!f2) b.append(','); f2 = false;
                    b.append("[").append(p).append(',').append(KeyGroupRangeAssignment.assignKeyToParallelOperator(k, maxP, p)).append(']');
                }
                b.append("]]");
            }
            System.out.println(b.append("}}"));
        }
        for (int maxP : MAX_PS) for (int p : PS) {
            if (p > maxP) continue;
            for (int i = 0; i < p; i++) {
                KeyGroupRange kgr = KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex(maxP, p, i);
                System.out.println("{\"kind\":\"range\",\"max_p\":" + maxP + ",\"p\":" + p + ",\"i\":" + i + ",\"start\":" + kgr.getStartKeyGroup() + ",\"end\":" + kgr.getEndKeyGroup() + "}");
            }
        }
        for (int p = 1; p <= 32768; p = p < 300 ? p + 1 : p * 3 / 2) {
            System.out.println("{\"kind\":\"default_max_p\",\"p\":" + p + ",\"max_p\":" + KeyGroupRangeAssignment.computeDefaultMaxParallelism(p) + "}");
        }
        int[] specials = {0, 1, -1, Integer.MIN_VALUE, Integer.MAX_VALUE, -2089875627};
        for (int s : specials) System.out.println("{\"kind\":\"murmur\",\"code\":" + s + ",\"murmur\":" + MathUtils.murmurHash(s) + "}");
        for (int i = 0; i < 2000; i++) { int c = r.nextInt(); System.out.println("{\"kind\":\"murmur\",\"code\":" + c + ",\"murmur\":" + MathUtils.murmurHash(c) + "}"); }
    }
}
