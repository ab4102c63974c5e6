"""The relay: committed log → Kafka. The only way an ``answer.published`` is produced."""
