"""Studies over built indexes: the index-size scale study and the demo."""
