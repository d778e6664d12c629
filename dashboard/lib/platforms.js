// Input platforms as the admin API names them, with the words the dashboard shows for them.

export const PLATFORMS = { ios: 'iOS', android: 'Android', web: 'Web', custom_feed: 'Custom feed' };
