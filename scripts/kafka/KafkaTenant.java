/*
 * One tenant's broker-side wall, for scripts/kafka/kafka.sh `tenant ID PASSWORD PREFIX`.
 *
 * Creates or updates the SCRAM user ID (SCRAM-SHA-256 and SCRAM-SHA-512, the same
 * password) and makes the ACLs of principal User:ID exactly these, all ALLOW from any
 * host, PREFIXED on PREFIX:
 *
 *   topics             Read, Write, Describe, Create, DescribeConfigs, Delete
 *                      (Delete: DeleteRecords, with which a worker purges its
 *                      repartition topic of what it read; DeleteTopics, with which
 *                      a deleted pipeline's progress and repartition topics go)
 *   groups             Read, Describe, Delete (a deleted pipeline's group goes)
 *   transactional ids  Write, Describe
 *   the cluster        IdempotentWrite (LITERAL kafka-cluster)
 *
 * and nothing else: any other ACL naming User:ID (say, from an earlier call with another
 * prefix) is deleted. Idempotent. It returns only once the broker's authorizer and its
 * SCRAM store answer with the new state, so a client may connect right after.
 *
 * Usage: java -cp "<kafka libs>/*:<this class>" KafkaTenant BOOTSTRAP ID PREFIX
 *        with the password in the environment variable WEIR_TENANT_PASSWORD (never on
 *        a command line, where `ps` shows it). BOOTSTRAP must be a listener whose
 *        principal is a super user (kafka.sh's PLAINTEXT listener: User:ANONYMOUS).
 * Exit: 0 done, 1 the broker refused or did not answer, 2 bad usage.
 */

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.ResourceNotFoundException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

public final class KafkaTenant {
    /** SCRAM iterations: Kafka's minimum is 4096; 8192 as in Kafka's own examples. */
    private static final int ITERATIONS = 8192;
    /** Seconds each admin call, and the wait for the new state, may take. */
    private static final long TIMEOUT_S = 30;

    public static void main(String[] args) {
        if (args.length != 3 || args[1].isEmpty() || args[2].isEmpty()) {
            System.err.println("usage: KafkaTenant BOOTSTRAP ID PREFIX (password in WEIR_TENANT_PASSWORD)");
            System.exit(2);
        }
        String password = System.getenv("WEIR_TENANT_PASSWORD");
        if (password == null || password.isEmpty()) {
            System.err.println("KafkaTenant: WEIR_TENANT_PASSWORD is not set or empty");
            System.exit(2);
        }
        try {
            run(args[0], args[1], password, args[2]);
        } catch (Exception e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            System.err.println("KafkaTenant: tenant " + args[1] + ": " + cause);
            System.exit(1);
        }
    }

    private static void run(String bootstrap, String id, String password, String prefix) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, (int) TimeUnit.SECONDS.toMillis(TIMEOUT_S));
        try (Admin admin = Admin.create(props)) {
            // One user's credential may be altered once per request: one request per mechanism.
            for (ScramMechanism m : List.of(ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)) {
                List<UserScramCredentialAlteration> scram =
                    List.of(new UserScramCredentialUpsertion(id, new ScramCredentialInfo(m, ITERATIONS), password));
                admin.alterUserScramCredentials(scram).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            }

            String principal = "User:" + id;
            Set<AclBinding> wanted = wantedAcls(principal, prefix);
            AclBindingFilter mine = new AclBindingFilter(ResourcePatternFilter.ANY,
                new AccessControlEntryFilter(principal, null, AclOperation.ANY, AclPermissionType.ANY));
            List<AclBindingFilter> stale = new ArrayList<>();
            for (AclBinding b : admin.describeAcls(mine).values().get(TIMEOUT_S, TimeUnit.SECONDS)) {
                if (!wanted.contains(b)) {
                    stale.add(b.toFilter());
                }
            }
            if (!stale.isEmpty()) {
                admin.deleteAcls(stale).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            }
            admin.createAcls(wanted).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            awaitApplied(admin, id, mine, wanted);
        }
    }

    private static Set<AclBinding> wantedAcls(String principal, String prefix) {
        Set<AclBinding> acls = new HashSet<>();
        add(acls, principal, new ResourcePattern(ResourceType.TOPIC, prefix, PatternType.PREFIXED),
            AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE,
            AclOperation.DESCRIBE_CONFIGS, AclOperation.DELETE);
        add(acls, principal, new ResourcePattern(ResourceType.GROUP, prefix, PatternType.PREFIXED),
            AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE);
        add(acls, principal, new ResourcePattern(ResourceType.TRANSACTIONAL_ID, prefix, PatternType.PREFIXED),
            AclOperation.WRITE, AclOperation.DESCRIBE);
        add(acls, principal, new ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
            AclOperation.IDEMPOTENT_WRITE);
        return acls;
    }

    private static void add(Set<AclBinding> acls, String principal, ResourcePattern pattern, AclOperation... ops) {
        for (AclOperation op : ops) {
            acls.add(new AclBinding(pattern, new AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW)));
        }
    }

    /** How many SCRAM mechanisms the broker knows for `id` (0 while it knows none). */
    private static int scramMechanisms(Admin admin, String id) throws Exception {
        try {
            UserScramCredentialsDescription d =
                admin.describeUserScramCredentials(List.of(id)).description(id).get(TIMEOUT_S, TimeUnit.SECONDS);
            return d.credentialInfos().size();
        } catch (ExecutionException e) {
            if (e.getCause() instanceof ResourceNotFoundException) {
                return 0;
            }
            throw e;
        }
    }

    /** Waits until the broker answers with exactly `wanted` and both SCRAM mechanisms. */
    private static void awaitApplied(Admin admin, String id, AclBindingFilter mine, Set<AclBinding> wanted)
            throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(TIMEOUT_S);
        while (true) {
            Set<AclBinding> now = new HashSet<>(admin.describeAcls(mine).values().get(TIMEOUT_S, TimeUnit.SECONDS));
            if (now.equals(wanted) && scramMechanisms(admin, id) == 2) {
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("the broker did not apply the ACLs and SCRAM credentials within "
                    + TIMEOUT_S + " s");
            }
            Thread.sleep(100);
        }
    }
}
