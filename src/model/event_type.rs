//! The Events API's event types (spec §1.6): one list, parsed once at the edge. Batches keep the
//! type as the string the client sent (bytes pass through unchanged); code that decides by type
//! parses it into [`EventType`].

/// An `event_type` of the Events API schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum EventType {
    SessionStart,
    SessionEnd,
    ScreenView,
    CustomEvent,
    CrashReport,
    OptOut,
    FirstRun,
    PreAttribution,
    PushRegistration,
    ApplicationStateTransition,
    PushMessage,
    NetworkPerformance,
    Breadcrumb,
    Profile,
    PushReaction,
    CommerceEvent,
    UserAttributeChange,
    UserIdentityChange,
    Uninstall,
}

impl EventType {
    /// Every event type, in the schema's order.
    pub(crate) const ALL: [EventType; 19] = [
        Self::SessionStart,
        Self::SessionEnd,
        Self::ScreenView,
        Self::CustomEvent,
        Self::CrashReport,
        Self::OptOut,
        Self::FirstRun,
        Self::PreAttribution,
        Self::PushRegistration,
        Self::ApplicationStateTransition,
        Self::PushMessage,
        Self::NetworkPerformance,
        Self::Breadcrumb,
        Self::Profile,
        Self::PushReaction,
        Self::CommerceEvent,
        Self::UserAttributeChange,
        Self::UserIdentityChange,
        Self::Uninstall,
    ];

    /// The wire name.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::SessionStart => "session_start",
            Self::SessionEnd => "session_end",
            Self::ScreenView => "screen_view",
            Self::CustomEvent => "custom_event",
            Self::CrashReport => "crash_report",
            Self::OptOut => "opt_out",
            Self::FirstRun => "first_run",
            Self::PreAttribution => "pre_attribution",
            Self::PushRegistration => "push_registration",
            Self::ApplicationStateTransition => "application_state_transition",
            Self::PushMessage => "push_message",
            Self::NetworkPerformance => "network_performance",
            Self::Breadcrumb => "breadcrumb",
            Self::Profile => "profile",
            Self::PushReaction => "push_reaction",
            Self::CommerceEvent => "commerce_event",
            Self::UserAttributeChange => "user_attribute_change",
            Self::UserIdentityChange => "user_identity_change",
            Self::Uninstall => "uninstall",
        }
    }

    /// The event type a wire name names, if any.
    pub(crate) fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips_through_its_wire_name() {
        for event_type in EventType::ALL {
            assert_eq!(EventType::parse(event_type.as_str()), Some(event_type));
        }
        let names: std::collections::HashSet<&str> =
            EventType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(names.len(), EventType::ALL.len(), "names are distinct");
        assert_eq!(EventType::parse("Custom_Event"), None);
        assert_eq!(EventType::parse(""), None);
    }
}
